// Model config.json.
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "runtime/bert_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  return fuzz::expect_clean([&] {
    BertConfig c = config_from_json(parse_json_text(fuzz::as_text(data, size), "config.json"), "config.json");
    (void)c.parameter_count(true);
    (void)config_to_json(c).dump();
  });
}

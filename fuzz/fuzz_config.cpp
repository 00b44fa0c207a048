// Model config.json.
#include "fuzz/fuzz_util.h"
#include "runtime/bert_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("config.json", data, size);
  return fuzz::expect_clean([&] {
    BertConfig c = load_config(file);
    (void)c.parameter_count(true);
    (void)config_to_json(c).dump();
  });
}

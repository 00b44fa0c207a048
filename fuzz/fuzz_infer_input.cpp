// in.json for `bertlab infer`, checked against the tiny fixture model's config.
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "runtime/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  static const BertConfig config =
      load_config(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert/config.json");
  return fuzz::expect_clean([&] {
    BertInputs in = inputs_from_json(parse_json_text(fuzz::as_text(data, size), "in.json"), "in.json");
    validate_inputs(in, config, "in.json");
  });
}

// in.json for `bertlab infer`, checked against the tiny fixture model's config.
#include "fuzz/fuzz_util.h"
#include "base/json_file.h"
#include "runtime/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  static const BertConfig config =
      load_config(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert/config.json");
  const auto file = fuzz::write_input("in.json", data, size);
  return fuzz::expect_clean([&] {
    BertInputs in = inputs_from_json(read_json_file(file, "input file"), file.string());
    validate_inputs(in, config, file.string());
  });
}

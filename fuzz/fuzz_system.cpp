// System JSON (accelerator descriptions for `bertlab estimate --system`).
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "hwmodel/system.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  return fuzz::expect_clean(
      [&] { (void)hw::system_from_json(parse_json_text(fuzz::as_text(data, size), "system.json"), "system.json"); });
}

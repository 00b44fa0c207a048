// machine.json (`bertlab calibrate`).
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "runtime/machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  return fuzz::expect_clean(
      [&] { (void)machine_from_json(parse_json_text(fuzz::as_text(data, size), "machine.json"), "machine.json"); });
}

// machine.json (`bertlab calibrate`).
#include "fuzz/fuzz_util.h"
#include "runtime/machine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("machine.json", data, size);
  return fuzz::expect_clean([&] { (void)load_machine(file); });
}

// A checkpoint's trainer_state.json.
#include "fuzz/fuzz_util.h"
#include "runtime/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("trainer_state.json", data, size);
  return fuzz::expect_clean([&] { (void)read_trainer_state(file).dump(); });
}

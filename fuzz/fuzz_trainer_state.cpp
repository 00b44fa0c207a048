// A checkpoint's trainer_state.json.
#include "base/json_file.h"
#include "fuzz/fuzz_util.h"
#include "runtime/trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  return fuzz::expect_clean([&] {
    (void)check_trainer_state(parse_json_text(fuzz::as_text(data, size), "trainer_state.json"), "trainer_state.json")
        .dump();
  });
}

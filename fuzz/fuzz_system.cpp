// System JSON (accelerator descriptions for `bertlab estimate --system`).
#include "fuzz/fuzz_util.h"
#include "hwmodel/system.h"
#include "base/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("system.json", data, size);
  return fuzz::expect_clean([&] { (void)hw::system_from_json(read_json_file(file, "system description"), file.string()); });
}

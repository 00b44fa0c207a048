// safetensors header and tensors: open, then read every tensor as the loaders do.
#include "fuzz/fuzz_util.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto file = fuzz::write_input("model.safetensors", data, size);
  return fuzz::expect_clean([&] {
    SafetensorsFile f(file);
    for (const auto& entry : f.tensors()) {
      const std::string& name = entry.first;  // no structured binding: clang 14 cannot capture one
      const SafetensorView& t = entry.second;
      if (t.dtype == "I32" || t.dtype == "I64") {
        fuzz::expect_clean([&] { f.read_i32(name); });
      } else if (t.nbytes <= (64u << 20)) {
        std::vector<float> out(static_cast<size_t>(numel(t.shape)));
        fuzz::expect_clean([&] { f.read_f32(name, t.shape, out.data()); });
      }
    }
  });
}

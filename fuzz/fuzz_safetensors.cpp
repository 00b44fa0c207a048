// safetensors header and tensors: validate, then read every tensor as the loaders do.
#include <vector>

#include "fuzz/fuzz_util.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  return fuzz::expect_clean([&] {
    SafetensorsFile f(std::vector<std::byte>(bytes, bytes + size), "model.safetensors");
    for (const auto& entry : f.tensors()) {
      const std::string& name = entry.first;  // no structured binding: clang 14 cannot capture one
      const SafetensorView& t = entry.second;
      if (t.nbytes > (64u << 20)) continue;
      std::vector<float> out(static_cast<size_t>(numel(t.shape)));
      fuzz::expect_clean([&] { f.read_f32(name, t.shape, out.data()); });  // refuses I32, I64, ...
    }
  });
}

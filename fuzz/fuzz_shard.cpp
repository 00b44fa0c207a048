// A pretraining shard: validate (header, checksum, every record) and read every instance. The
// checksum is recomputed over the fuzzed bytes half of the time, so that mutations reach the
// record checks instead of stopping at the checksum.
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bertlab;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= 64 && (bytes[63] & 1)) {
    uint64_t sum = data::fnv1a64(bytes.data(), 56);
    sum = data::fnv1a64(bytes.data() + 64, bytes.size() - 64, sum);
    std::memcpy(bytes.data() + 56, &sum, 8);
  }
  return fuzz::expect_clean([&] {
    auto s = data::Shard::parse(std::move(bytes), "a.shard");
    for (size_t i = 0; i < s.size(); ++i) (void)s.get(i);
  });
}

#pragma once
// A small, portable random generator (xoshiro256**, seeded through SplitMix64). Streams are
// derived from (seed, ids...) so that parallel work draws the same numbers whatever the
// thread count, and every platform draws the same numbers for the same seed.
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace bertlab::data {

__extension__ typedef unsigned __int128 Uint128;

class Rng {
 public:
  explicit Rng(std::uint64_t seed, std::initializer_list<std::uint64_t> stream = {}) {
    std::uint64_t x = seed;
    for (auto id : stream) x = splitmix(x) ^ (id + 0x9E3779B97F4A7C15ull);
    for (auto& s : s_) s = splitmix(x);
  }
  std::uint64_t next() {
    std::uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive, like Python's random.randint).
  std::int64_t randint(std::int64_t lo, std::int64_t hi) {
    auto range = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(static_cast<Uint128>(next()) * range >> 64);
  }
  // Fisher-Yates, like Python's random.shuffle.
  template <typename It>
  void shuffle(It first, It last) {
    auto n = last - first;
    for (auto i = n - 1; i > 0; --i) std::swap(first[i], first[randint(0, i)]);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace bertlab::data

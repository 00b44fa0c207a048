#pragma once
// The set footprint of a reuse window: how many distinct cache lines of a group of sweeps
// fall into each set of a set-associative cache, computed per sweep from the arithmetic
// progression of its line indices (no per-access enumeration). An LRU line survives a
// reuse window iff the window's distinct lines in its set do not exceed the ways (LRU stack
// distance per set), so the lines of an operand that miss at a reuse are those in sets
// whose window load exceeds the associativity.
#include <bit>
#include <cstdint>
#include <numeric>
#include <vector>

#include "hwmodel/layout.h"
#include "hwmodel/system.h"

namespace bertlab::hw {

// log2(x) when x is a power of two, else -1.
inline int log2_or_minus_one(int64_t x) {
  return x > 0 && std::has_single_bit(static_cast<uint64_t>(x)) ? std::countr_zero(static_cast<uint64_t>(x)) : -1;
}

// The block (cache line, DRAM row) of `bytes` bytes an address lies in: a shift when `bytes`
// is a power of two, else a division (the same value; speed only).
class BlockOf {
 public:
  explicit BlockOf(int64_t bytes) : bytes_(static_cast<uint64_t>(bytes)), shift_(log2_or_minus_one(bytes)) {}
  int64_t operator()(uint64_t a) const { return static_cast<int64_t>(shift_ >= 0 ? a >> shift_ : a / bytes_); }

 private:
  uint64_t bytes_;
  int shift_;
};

// Hashed (XOR-folded, CacheDesc::set_of) indexes are resolved per set up to this many sets,
// and beyond it when the cache has fewer than kUniformHashedWays ways. Larger hashed caches of
// kUniformHashedWays or more ways (the paper system's 1 MB, 8-way, 2048-set LLC) are treated
// as uniformly loaded (the capacity test: the hash spreads each aligned block of `sets` lines
// evenly, so contiguous footprints load the sets within a line or two of the mean). A speed
// limit, not a property of the cache: the per-set windows cost O(sets) and a loop over the
// rows per window; resolving every hashed cache made the hashed benchmark (100
// configurations of the BERT-large training graph, 8-way LLCs of 1-16 MB) 62.7 s of CPU
// instead of ~0.9 s, measured under load. On a 1 MB hashed LLC the capacity test matched the
// simulator's DRAM bytes within 2% on 13 of 14 GEMM shapes at 8 ways (worst 33%), but on 6
// of 14 at 2 ways (worst 46%), where the per-set windows are within 0.53% on all 14
// (docs/hwmodel.md, "Hashed set index"). A cache with `exact_sets` is resolved per set whatever
// its size: exact at every associativity, at the cost of the modulo path.
inline constexpr int64_t kMaxResolvedHashedSets = 512;
inline constexpr int64_t kUniformHashedWays = 8;

class SetLoad {
 public:
  explicit SetLoad(const CacheDesc& c);
  // Whether SetLoad(c) resolves sets (not uniform()), without building one (O(sets)).
  static bool resolves_sets(const CacheDesc& c) {
    return !(c.sets() <= 1 || (c.hashed_index && !c.exact_sets && c.sets() > kMaxResolvedHashedSets &&
                               c.ways >= kUniformHashedWays));
  }
  // Adds the distinct lines of `s` (sweeps of one operand touch disjoint lines), `times`
  // times (a whole number when sets are resolved): -1 takes back exactly what add(s) added
  // (the per-set counts are whole numbers), so a window can be moved by removing sweeps
  // instead of rebuilt.
  void add(const Sweep& s, double times = 1.0);
  void add(const std::vector<Sweep>& v, double times = 1.0) {
    for (const auto& s : v) add(s, times);
  }
  void add(const SetLoad& o);
  // `n` lines (a whole number; negative: fewer) in the set of `line` (set-resolved only).
  void add_line(int64_t line, double n) {
    if (!uniform_) per_set_[index_(line)] += static_cast<int32_t>(n);
  }
  // The lines counted in the set of `line` (set-resolved).
  double set_load(int64_t line) const { return base_ + per_set_[index_(line)]; }
  // Lines counted in sets whose load in `window` exceeds the ways: the lines of this
  // footprint that an LRU cache of the window's sets evicts before their next use.
  double lines_over(const SetLoad& window) const;
  double total() const;
  // The fewest lines any set holds (set-resolved; uniform: the lines per set).
  double min_load() const;
  // True when sets are not resolved (one set, or a large hashed index): then either every line or
  // none is in an overflowing set, as `overflowing()` says for all of them.
  bool uniform() const { return uniform_; }
  bool overflowing_uniform() const { return base_ > ways_ + 1e-9; }
  // Whether this window, with `extra` more lines in that set, holds more lines than the
  // ways in the set of `line` (set-resolved).
  bool overflowing(int64_t line, double extra = 0) const {
    return base_ + per_set_[index_(line)] + extra > ways_ + 1e-9;
  }
  // The lines of `v`, one line-wide sweep per run of consecutive lines, that lie in sets
  // this window overflows: the lines an LRU cache re-fetches at their next use.
  std::vector<Sweep> overflowing_lines(const std::vector<Sweep>& v) const;
  // The same lines as overflowing_lines(v), in the same order, listed for reads: runs of
  // overflowing segments of one sweep as one strided sweep each, when v is one sweep whose
  // segments are distinct whole lines (each inside one line, at a whole-line stride) and the
  // sets are resolved; else overflowing_lines(v). A list of reads costs its lines and the
  // rows its lines enter in order (DramStreams::read), the same either way, but this list
  // holds a sweep per run instead of one per line (speed only).
  std::vector<Sweep> overflowing_reads(const std::vector<Sweep>& v) const;

 private:
  // One set (fully associative), or a hashed index with more than kMaxResolvedHashedSets
  // sets and at least kUniformHashedWays ways: the capacity test. Modulo and other hashed
  // indexes are resolved per set.
  bool uniform_;
  SetIndex index_;  // the line's set (modulo or hashed)
  int64_t sets_, ways_, line_;
  // Divisions by the sets and the line bytes as shifts and masks when they are powers of two
  // (-1 otherwise); the arguments are line numbers and addresses, never negative (speed only).
  int sets_shift_;
  BlockOf line_of;
  int64_t div_sets(int64_t x) const { return sets_shift_ >= 0 ? x >> sets_shift_ : x / sets_; }
  int64_t mod_sets(int64_t x) const { return sets_shift_ >= 0 ? x & (sets_ - 1) : x % sets_; }
  // Under a modulo index, lines d apart (d > 0) return to the same set every
  // sets / gcd(d, sets) lines of the progression.
  int64_t modulo_period(int64_t d) const { return sets_ / std::gcd(d % sets_ == 0 ? sets_ : d % sets_, sets_); }
  // Set-resolved: the window's per-set loads are whole numbers (lines counted whole times),
  // kept as int32 rather than double (exact, half the bytes to copy and add, and the loops
  // over the sets vectorise; speed only).
  double base_ = 0;               // lines in every set (whole turns of the set index)
  std::vector<int32_t> per_set_;  // lines beyond base_ per set
  // Set-resolved: a set overflows iff base_ + per_set_[s] > ways_, i.e. (whole numbers)
  // per_set_[s] > ways_ - base_.
  int64_t over_limit() const { return ways_ - static_cast<int64_t>(base_); }
};

}  // namespace bertlab::hw

#pragma once
// The set footprint of a reuse window: how many distinct cache lines of a group of sweeps
// fall into each set of a set-associative cache, computed per sweep from the arithmetic
// progression of its line indices (no per-access enumeration). An LRU line survives a
// reuse window iff the window's distinct lines in its set do not exceed the ways (LRU stack
// distance per set), so the lines of an operand that miss at a reuse are those in sets
// whose window load exceeds the associativity.
#include <array>
#include <bit>
#include <cstdint>
#include <numeric>
#include <vector>

#include "hwmodel/layout.h"
#include "hwmodel/system.h"

namespace bertlab::hw {

// Hashed (XOR-folded, CacheDesc::set_of) indexes are resolved per set up to this many sets,
// and beyond it when the cache has fewer than kUniformHashedWays ways. Larger hashed caches of
// kUniformHashedWays or more ways (the paper system's 1 MB, 8-way, 2048-set LLC) are not
// resolved: their windows are spread (a per-set load distribution, the `spread_` members
// below), which keeps the associativity at O(ways^2) per window. A speed limit, not a
// property of the cache: the per-set windows cost O(sets) and a loop over the rows per
// window; resolving every hashed cache (`exact_sets`) makes the hashed benchmark (100
// configurations of the BERT-large training graph, 8-way LLCs of 1-16 MB) ~13 s instead of
// under 1 s. On a 1 MB hashed LLC, against the simulator's DRAM bytes on 14 GEMM shapes:
// spread windows within 2% on 13 at 8 ways (worst 5.5%) and 13 at 16 ways (worst 4.3%); the
// capacity test they replaced (every set at the mean load) was 33% and 8.2% off at worst and
// gave 8 and 16 ways the same bytes (docs/hwmodel.md, "Hashed set index"). A cache with
// `exact_sets` is resolved per set whatever its size: exact at every associativity, at the
// cost of the modulo path.
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
  void add(const std::vector<Sweep>& v, double times = 1.0);
  void add(const SetLoad& o);
  // `n` lines (a whole number; negative: fewer) in the set of `line` (set-resolved only).
  void add_line(int64_t line, double n) {
    if (!uniform_) per_set_[index_(line)] += static_cast<int32_t>(n);
  }
  // The lines counted in the set of `line` (set-resolved).
  double set_load(int64_t line) const { return base_ + per_set_[index_(line)]; }
  // Lines counted in sets whose load in `window` exceeds the ways: the lines of this
  // footprint that an LRU cache of the window's sets evicts before their next use (spread:
  // their expected number).
  double lines_over(const SetLoad& window) const;
  double total() const;
  // The fewest lines any set holds (set-resolved; uniform: the lines per set, spread: the whole turns).
  double min_load() const;
  // True when sets are not resolved (one set, or a large hashed index): then every set is alike
  // (one set: the capacity test) or the window is spread (a large hashed index), and which lines
  // overflow is a share (miss_share), not a list (overflowing_lines lists all or none).
  bool uniform() const { return uniform_; }
  // Uniform: the share of the lines of `v` (one operand's footprint in this window) that an
  // LRU cache of the window's sets evicts before their next use: 0 or 1 under the capacity
  // test, between them on a spread hashed index (below).
  double miss_share(const std::vector<Sweep>& v) const;
  // Uniform: the same for a footprint of whole turns of the index (every set alike).
  double overflow_share() const { return spread_ ? share_over(true) : (base_ > ways_ + 1e-9 ? 1.0 : 0.0); }
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
  // One set (fully associative: the capacity test), or a hashed index with more than
  // kMaxResolvedHashedSets sets and at least kUniformHashedWays ways (spread, below; of more
  // than kSpreadWays ways, the capacity test). Modulo and other hashed indexes are resolved
  // per set.
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

  // Uniform on a hashed index of many sets (`spread_`): the distribution of a set's load.
  // The hash maps each aligned block of `sets` lines one to one onto the sets and spreads a
  // footprint (the sweeps of one operand added together) as evenly as the sets allow: n
  // lines put n / sets lines in every set (`whole_`) and one more in a share
  // (n mod sets) / sets of them. Which sets get the extra line differs from footprint to
  // footprint as if drawn at random: one Bernoulli part per footprint, independent of the
  // others (the binomial model of a randomly indexed cache; docs/hwmodel.md, "Hashed set
  // index"). pmf_[k] is the probability that the parts put k lines in a set, k = 0..ways_,
  // and pmf_[ways_ + 1] that they put more. Caches of more than kSpreadWays ways keep the
  // capacity test (their loads vary little against the ways).
  static constexpr int64_t kSpreadWays = 32;
  bool spread_ = false;
  double whole_ = 0;
  std::array<double, kSpreadWays + 2> pmf_{};
  // n more parts, each loading a set with probability p.
  void add_parts(int64_t n, double p);
  // n distinct lines of one footprint, added `times` times (uniform windows add whole, positive
  // numbers of times; they are never moved).
  void add_spread(int64_t n, double times);
  // The probability that a set overflows the ways (`whole_lines`: the share of the window's
  // whole-turn lines that overflow), or (false) the share of its partial lines that do: a
  // partial line lies in a set with k partial lines with probability proportional to k.
  double share_over(bool whole_lines) const;
  // The expected lines this window evicts of a footprint of `lines` lines, `whole_lines` of
  // them in whole turns of the index: those at the whole-turn share, the rest at the partial
  // share (lines_over, miss_share).
  double evicted(double whole_lines, double lines) const;
};
}  // namespace bertlab::hw

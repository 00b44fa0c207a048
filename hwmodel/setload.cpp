#include "hwmodel/setload.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <numeric>

namespace bertlab::hw {

SetLoad::SetLoad(const CacheDesc& c)
    : uniform_(!resolves_sets(c)),
      index_(c),
      sets_(c.sets()),
      ways_(c.ways),
      line_(c.line_bytes),
      sets_shift_(log2_or_minus_one(sets_)),
      line_of(line_) {
  if (!uniform_) per_set_.assign(static_cast<size_t>(sets_), 0);
  spread_ = uniform_ && index_.hashed && ways_ <= kSpreadWays;
  pmf_[0] = 1.0;
}

void SetLoad::add_parts(int64_t n, double p) {
  if (n <= 0 || p <= 0) return;
  // n Bernoulli(p) parts, one at a time (k lines -> k + 1 with probability p), the tail
  // bucket ways_ + 1 absorbing "more than the ways".
  const auto top = static_cast<size_t>(ways_ + 1);
  for (int64_t i = 0; i < n; ++i) {
    if (pmf_[top] >= 1.0 - 1e-12) return;  // every set already over: nothing changes
    pmf_[top] += pmf_[top - 1] * p;
    for (size_t k = top - 1; k > 0; --k) pmf_[k] = pmf_[k] * (1 - p) + pmf_[k - 1] * p;
    pmf_[0] *= 1 - p;
  }
}

void SetLoad::add_spread(int64_t n, double times) {
  const auto t = static_cast<int64_t>(times);  // uniform windows add whole numbers of times
  if (t <= 0 || n <= 0) return;
  // The hash spreads the lines of one footprint (a tile, a block: sweeps of one operand) as
  // evenly as the sets allow: n lines put n / sets in every set and one more in a share
  // (n mod sets) / sets of them. Which sets those are differs from footprint to footprint
  // as if drawn at random.
  whole_ += static_cast<double>(t * div_sets(n));
  if (mod_sets(n) > 0) add_parts(t, static_cast<double>(mod_sets(n)) / static_cast<double>(sets_));
}

void SetLoad::add(const std::vector<Sweep>& v, double times) {
  if (!spread_) {
    for (const auto& s : v) add(s, times);
    return;
  }
  const int64_t n = lines_of(v, line_);
  base_ += times * (static_cast<double>(n) / static_cast<double>(sets_));
  add_spread(n, times);
}

double SetLoad::share_over(bool whole_lines) const {
  const auto w = static_cast<int64_t>(whole_ + 0.5);
  if (w > ways_) return 1.0;
  // A set overflows when the parts put more than ways_ - w lines in it.
  const int64_t room = ways_ - w;
  double below = 0, below_lines = 0;  // P(k <= room), E[k; k <= room]
  for (int64_t k = 0; k <= room; ++k) below += pmf_[k], below_lines += static_cast<double>(k) * pmf_[k];
  // Shares within kNegligible of 0 or 1 are taken as 0 or 1 (the capacity test's answers):
  // a window far from the ways charges all or none of a list, as before.
  constexpr double kNegligible = 1e-6;
  auto snap = [](double q) { return q < kNegligible ? 0.0 : q > 1 - kNegligible ? 1.0 : q; };
  if (whole_lines) return snap(1.0 - below);
  const double mean_parts = base_ - whole_;  // E[k]: the parts' lines per set
  return mean_parts <= 1e-12 ? 0.0 : snap(1.0 - below_lines / mean_parts);
}

double SetLoad::miss_share(const std::vector<Sweep>& v) const {
  if (!spread_) return overflow_share();
  if (share_over(true) == share_over(false)) return share_over(true);  // (no need to count the lines; speed only)
  const int64_t n = lines_of(v, line_);
  return n == 0 ? 0.0 : evicted(static_cast<double>(n - mod_sets(n)), static_cast<double>(n)) / static_cast<double>(n);
}

double SetLoad::evicted(double whole_lines, double lines) const {
  return whole_lines * share_over(true) + (lines - whole_lines) * share_over(false);
}

void SetLoad::add(const Sweep& s, double times) {
  if (s.count <= 0 || s.width <= 0) return;
  if (uniform_) {
    const int64_t n_lines = distinct_blocks(s, line_);
    base_ += times * (static_cast<double>(n_lines) / std::max<int64_t>(1, sets_));
    if (spread_) add_spread(n_lines, times);
    return;
  }
  const auto t = static_cast<int32_t>(times);  // a whole number (setload.h)
  // One contiguous run of lines: whole turns of the set index load every set, the rest
  // loads consecutive sets from the first line's set on.
  auto add_run = [&](int64_t first_line, int64_t n) {
    if (index_.hashed) {
      // XOR-folded index (system.h): each aligned block of `sets` lines loads every set
      // once; the partial blocks at the ends are hashed line by line.
      const int64_t head = std::min(n, mod_sets(sets_ - mod_sets(first_line)));
      for (int64_t i = 0; i < head; ++i) per_set_[index_(first_line + i)] += t;
      const int64_t whole = div_sets(n - head);
      base_ += times * static_cast<double>(whole);
      for (int64_t l = first_line + head + whole * sets_; l < first_line + n; ++l) per_set_[index_(l)] += t;
      return;
    }
    if (n >= sets_) base_ += times * static_cast<double>(div_sets(n));
    // Sets first .. first + rest - 1 modulo the sets: up to the last set, then from set 0
    // (two contiguous loops that vectorise; speed only).
    const int64_t first = mod_sets(first_line), rest = n < sets_ ? n : mod_sets(n);
    const int64_t upto_end = std::min(rest, sets_ - first);
    int32_t* p = per_set_.data();
    for (int64_t i = 0; i < upto_end; ++i) p[first + i] += t;
    for (int64_t i = 0; i < rest - upto_end; ++i) p[i] += t;
  };
  if (s.count == 1 || s.stride <= s.width) {
    // One contiguous span (distinct_blocks' contiguous case, inline).
    const int64_t first = line_of(s.start);
    add_run(first, line_of(s.end() - 1) - first + 1);
    return;
  }
  if (s.stride % line_ == 0 && !index_.hashed) {
    // Segments at a whole-line stride: line offset o of segment i is line b + o + i*d, an
    // arithmetic progression modulo the sets with period sets / gcd(d, sets).
    const int64_t d = s.stride / line_;
    const int64_t first = line_of(s.start);
    const int64_t span = line_of(s.start + s.width - 1) - first + 1;
    const int64_t period = modulo_period(d);
    const int64_t turns = s.count / period, rest = s.count % period;
    const int64_t step = d % sets_, n = std::min(period, s.count);
    for (int64_t o = 0; o < span; ++o) {
      int64_t at = mod_sets(first + o);  // (first + o + i * d) % sets, stepped (speed only)
      for (int64_t i = 0; i < n; ++i) {
        per_set_[at] += t * static_cast<int32_t>(turns + (i < rest ? 1 : 0));
        at += step;
        if (at >= sets_) at -= sets_;
      }
    }
    return;
  }
  // Other strides (and strided sweeps under a hashed index): segment by segment, each a
  // run of consecutive lines (a line shared with the previous segment is counted once).
  int64_t last = -1;
  for (int64_t i = 0; i < s.count; ++i) {
    const uint64_t a = s.start + i * s.stride;
    int64_t lo = line_of(a);
    const int64_t hi = line_of(a + s.width - 1);
    if (lo == last) ++lo;
    if (lo <= hi) add_run(lo, hi - lo + 1);
    last = hi;
  }
}

void SetLoad::add(const SetLoad& o) {
  base_ += o.base_;
  if (spread_ && o.spread_) {
    // The sum of two independent per-set loads: their distributions convolved.
    whole_ += o.whole_;
    std::array<double, kSpreadWays + 2> sum{};
    const auto top = static_cast<size_t>(ways_ + 1);
    for (size_t i = 0; i <= top; ++i)
      for (size_t j = 0; j <= top; ++j) sum[std::min(top, i + j)] += pmf_[i] * o.pmf_[j];
    pmf_ = sum;
  }
  const size_t n = std::min(per_set_.size(), o.per_set_.size());
  int32_t* p = per_set_.data();
  const int32_t* q = o.per_set_.data();
  for (size_t i = 0; i < n; ++i) p[i] += q[i];
}

double SetLoad::total() const {
  int64_t sum = 0;  // whole numbers: the double sum of the counts, exactly
  for (int32_t x : per_set_) sum += x;
  return base_ * static_cast<double>(uniform_ ? std::max<int64_t>(1, sets_) : sets_) + static_cast<double>(sum);
}

double SetLoad::min_load() const {
  if (spread_) return whole_;  // the sets that no footprint's part reaches
  int32_t least = per_set_.empty() ? 0 : per_set_[0];
  for (int32_t x : per_set_) least = std::min(least, x);
  return base_ + least;
}

double SetLoad::lines_over(const SetLoad& window) const {
  if (uniform_ && !window.spread_) return window.base_ > ways_ + 1e-9 ? total() : 0.0;
  if (uniform_) {
    return window.evicted(whole_ * static_cast<double>(sets_), total());
  }
  // Whole numbers: the sum of base_ + per_set_[s] over the overflowing sets, exactly.
  const int64_t lim = window.over_limit();
  int64_t sets_over = 0, sum = 0;
  for (int64_t s = 0; s < sets_; ++s) {
    const bool over = window.per_set_[s] > lim;
    sets_over += over;
    sum += over ? per_set_[s] : 0;
  }
  return base_ * static_cast<double>(sets_over) + static_cast<double>(sum);
}

namespace {

// A run of overflowing lines being collected (bytes [start, start + width)).
struct RawRun {
  uint64_t start;
  int64_t width;
};

// The lines of `v` in sets `cnt` overflows (cnt[set(line)] > lim), each line once when
// consecutive segments share it, written to `out` as the runs of consecutive lines that
// SetLoad::overflowing_lines lists; returns how many. Branch-free per line (each line
// writes a candidate run that is kept only when it starts one: partly overflowing windows
// made the branches unpredictable), and a line's number by a shift when the line bytes
// are a power of two (speed only). `out` has room for one run per line plus one.
size_t collect_over(const std::vector<Sweep>& v, int64_t L, const int32_t* cnt, int64_t lim, const SetIndex set_of,
                    RawRun* out) {
  const BlockOf line_of(L);
  size_t n = 0;
  uint64_t run_end = ~uint64_t{0};  // one past the last run's last byte (none yet)
  int64_t last = -1;
  auto take = [&](int64_t lo, int64_t hi) {  // lines lo..hi, in order
    if (lo == last) ++lo;
    for (int64_t ln = lo; ln <= hi; ++ln) {
      const bool over = cnt[set_of(ln)] > lim;
      const uint64_t a = static_cast<uint64_t>(ln) * L;
      const bool joins = n > 0 && run_end == a;
      out[n] = RawRun{a, L};  // a new run (kept only when it starts one)
      out[n - (n > 0)].width += (over && joins) ? L : 0;
      n += over && !joins;
      run_end = over ? a + L : run_end;
    }
    if (hi >= lo) last = hi;
  };
  for (const auto& s : v) {
    if (s.count <= 0 || s.width <= 0) continue;
    if (s.count == 1 || s.stride <= s.width) {
      take(line_of(s.start), line_of(s.end() - 1));
      continue;
    }
    for (int64_t i = 0; i < s.count; ++i) {
      const uint64_t a = s.start + i * s.stride;
      take(line_of(a), line_of(a + s.width - 1));
    }
  }
  return n;
}

}  // namespace

std::vector<Sweep> SetLoad::overflowing_lines(const std::vector<Sweep>& v) const {
  std::vector<Sweep> out;
  if (uniform_) {  // all or none (a share between them: DramStreams::missing)
    if (overflow_share() >= 1) out = v;
    return out;
  }
  int64_t lines = 0;  // an upper bound on the runs (a segment's lines, shared ones twice)
  for (const auto& s : v) {
    if (s.count <= 0 || s.width <= 0) continue;
    if (s.count == 1 || s.stride <= s.width) lines += static_cast<int64_t>((s.end() - 1) / line_ - s.start / line_ + 1);
    else lines += s.count * ((s.width + line_ - 1) / line_ + 1);
  }
  if (lines == 0) return out;
  // Scratch without zeroing it first (RawRun has no initialisers; speed only).
  const std::unique_ptr<RawRun[]> runs(new RawRun[static_cast<size_t>(lines) + 1]);
  const int64_t lim = over_limit();
  // The index passed by value: a local copy that the stores to `runs` cannot alias (speed only).
  const size_t n = collect_over(v, line_, per_set_.data(), lim, index_, runs.get());
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(Sweep{runs[i].start, 1, runs[i].width, runs[i].width});
  return out;
}

std::vector<Sweep> SetLoad::overflowing_reads(const std::vector<Sweep>& v) const {
  if (uniform_ || v.size() != 1) return overflowing_lines(v);
  const Sweep& s = v[0];
  const uint64_t L = static_cast<uint64_t>(line_);
  const bool lines_apart = s.count > 1 && s.stride >= line_ && s.stride % line_ == 0 && s.start % L + s.width <= L;
  if (!lines_apart) return overflowing_lines(v);
  std::vector<Sweep> out;
  const int64_t lim = over_limit();
  const int64_t first = line_of(s.start), d = s.stride / line_;
  const SetIndex set_of = index_;  // a local copy (speed only)
  // Under a modulo index segment i's set repeats with period sets / gcd(d, sets): whether it
  // overflows is decided for one period, and a sweep none of whose sets overflow is told in
  // O(period) (speed only; the same lines).
  const int64_t period = index_.hashed ? s.count : modulo_period(d);
  const int64_t n = std::min(s.count, period);
  thread_local std::vector<uint8_t> flag;
  flag.resize(static_cast<size_t>(n));
  int64_t overs = 0;
  for (int64_t i = 0; i < n; ++i) {
    flag[i] = per_set_[set_of(first + i * d)] > lim;
    overs += flag[i];
  }
  if (overs == 0) return out;
  if (overs == n) return {Sweep{static_cast<uint64_t>(first) * L, s.count, s.stride, line_}};
  bool open = false;  // whether the last segment overflowed (its run is out.back())
  for (int64_t i = 0, p = 0; i < s.count; ++i, p = p + 1 == period ? 0 : p + 1) {
    const bool over = flag[p];
    if (over && open) ++out.back().count;
    else if (over) out.push_back(Sweep{static_cast<uint64_t>(first + i * d) * L, 1, s.stride, line_});
    open = over;
  }
  return out;
}

}  // namespace bertlab::hw

#include "hwmodel/setload.h"

#include <algorithm>
#include <numeric>

namespace bertlab::hw {

SetLoad::SetLoad(const CacheDesc& c)
    : uniform_(!resolves_sets(c)),
      index_(c),
      sets_(c.sets()),
      ways_(c.ways),
      line_(c.line_bytes) {
  if (!uniform_) per_set_.assign(static_cast<size_t>(sets_), 0.0);
}

void SetLoad::add(const Sweep& s, double times) {
  if (s.count <= 0 || s.width <= 0) return;
  const int64_t n_lines = distinct_blocks(s, line_);
  if (uniform_) {
    base_ += times * (static_cast<double>(n_lines) / std::max<int64_t>(1, sets_));
    return;
  }
  // One contiguous run of lines: whole turns of the set index load every set, the rest
  // loads consecutive sets from the first line's set on.
  auto add_run = [&](int64_t first_line, int64_t n) {
    if (index_.hashed) {
      // XOR-folded index (system.h): each aligned block of `sets` lines loads every set
      // once; the partial blocks at the ends are hashed line by line.
      const int64_t head = std::min(n, (sets_ - first_line % sets_) % sets_);
      for (int64_t i = 0; i < head; ++i) per_set_[index_(first_line + i)] += times;
      const int64_t whole = (n - head) / sets_;
      base_ += times * static_cast<double>(whole);
      for (int64_t l = first_line + head + whole * sets_; l < first_line + n; ++l) per_set_[index_(l)] += times;
      return;
    }
    base_ += times * static_cast<double>(n / sets_);
    const int64_t rest = n % sets_;
    for (int64_t i = 0; i < rest; ++i) per_set_[(first_line + i) % sets_] += times;
  };
  if (s.count == 1 || s.stride <= s.width) {
    add_run(static_cast<int64_t>(s.start / line_), n_lines);
    return;
  }
  if (s.stride % line_ == 0 && !index_.hashed) {
    // Segments at a whole-line stride: line offset o of segment i is line b + o + i*d, an
    // arithmetic progression modulo the sets with period sets / gcd(d, sets).
    const int64_t d = s.stride / line_;
    const int64_t first = static_cast<int64_t>(s.start / line_);
    const int64_t span = static_cast<int64_t>((s.start + s.width - 1) / line_) - first + 1;
    const int64_t period = sets_ / std::gcd(d % sets_ == 0 ? sets_ : d % sets_, sets_);
    const int64_t turns = s.count / period, rest = s.count % period;
    for (int64_t o = 0; o < span; ++o) {
      for (int64_t i = 0; i < std::min(period, s.count); ++i)
        per_set_[(first + o + i * d) % sets_] += times * static_cast<double>(turns + (i < rest ? 1 : 0));
    }
    return;
  }
  // Other strides (and strided sweeps under a hashed index): segment by segment, each a
  // run of consecutive lines (a line shared with the previous segment is counted once).
  int64_t last = -1;
  for (int64_t i = 0; i < s.count; ++i) {
    const uint64_t a = s.start + i * s.stride;
    int64_t lo = static_cast<int64_t>(a / line_);
    const int64_t hi = static_cast<int64_t>((a + s.width - 1) / line_);
    if (lo == last) ++lo;
    if (lo <= hi) add_run(lo, hi - lo + 1);
    last = hi;
  }
}

void SetLoad::add(const SetLoad& o) {
  base_ += o.base_;
  for (size_t i = 0; i < per_set_.size() && i < o.per_set_.size(); ++i) per_set_[i] += o.per_set_[i];
}

double SetLoad::total() const {
  double t = base_ * (uniform_ ? std::max<int64_t>(1, sets_) : sets_);
  for (double x : per_set_) t += x;
  return t;
}

double SetLoad::min_load() const {
  double least = per_set_.empty() ? 0.0 : per_set_[0];
  for (double x : per_set_) least = std::min(least, x);
  return base_ + least;
}

double SetLoad::lines_over(const SetLoad& window) const {
  if (uniform_) return window.base_ > ways_ + 1e-9 ? total() : 0.0;
  double over = 0;
  for (int64_t s = 0; s < sets_; ++s)
    if (window.base_ + window.per_set_[s] > ways_ + 1e-9) over += base_ + per_set_[s];
  return over;
}

std::vector<Sweep> SetLoad::overflowing_lines(const std::vector<Sweep>& v) const {
  std::vector<Sweep> out;
  if (uniform_) {
    if (overflowing_uniform()) out = v;
    return out;
  }
  int64_t last = -1;
  auto keep = [&](int64_t ln) {
    if (ln == last) return;
    last = ln;
    if (!overflowing(ln)) return;
    const uint64_t a = static_cast<uint64_t>(ln) * line_;
    if (!out.empty() && out.back().count == 1 && out.back().end() == a) {
      out.back().width += line_;
      out.back().stride = out.back().width;
    } else {
      out.push_back({a, 1, line_, line_});
    }
  };
  for (const auto& s : v) {
    if (s.count <= 0 || s.width <= 0) continue;
    if (s.count == 1 || s.stride <= s.width) {
      for (int64_t ln = s.start / line_; ln <= static_cast<int64_t>((s.end() - 1) / line_); ++ln) keep(ln);
      continue;
    }
    for (int64_t i = 0; i < s.count; ++i) {
      const uint64_t a = s.start + i * s.stride;
      for (int64_t ln = a / line_; ln <= static_cast<int64_t>((a + s.width - 1) / line_); ++ln) keep(ln);
    }
  }
  return out;
}

}  // namespace bertlab::hw

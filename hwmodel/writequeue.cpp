#include "hwmodel/writequeue.h"

#include <algorithm>
#include <cmath>

namespace bertlab::hw {

WriteQueue::WriteQueue(int64_t line_bytes, int64_t row_bytes, int64_t depth_lines)
    : L_(line_bytes), R_(row_bytes), depth_(std::max<int64_t>(1, depth_lines)) {}

void WriteQueue::drain_oldest() {
  // Every queued line of the oldest line's row is issued; the first opens the row unless
  // the bank still has it open, the rest hit.
  const auto [row, n] = rows_.front();
  if (row != open_row_) ++misses_;
  open_row_ = row;
  queued_ -= n;
  rows_.erase(rows_.begin());
}

void WriteQueue::push_row(int64_t row, int64_t n) {
  while (n > 0) {
    // Lines join one by one and the queue drains when it reaches its depth: up to that
    // point a run of lines in one row only grows that row's count.
    const int64_t k = std::min(n, depth_ - queued_);
    auto it = std::find_if(rows_.rbegin(), rows_.rend(), [&](const auto& q) { return q.first == row; });
    if (it == rows_.rend()) rows_.emplace_back(row, k);
    else it->second += k;
    queued_ += k;
    n -= k;
    if (queued_ >= depth_) drain_oldest();
  }
}

void WriteQueue::push(const Sweep& s, int64_t max_segments) {
  if (s.count <= 0 || s.width <= 0) return;
  const int64_t per_row = R_ / L_;
  // Lines [l0, l1] in order, split at DRAM row boundaries.
  auto push_lines = [&](int64_t l0, int64_t l1) {
    while (l0 <= l1) {
      const int64_t row = l0 * L_ / R_;
      const int64_t end = std::min(l1, (row + 1) * per_row - 1);
      push_row(row, end - l0 + 1);
      l0 = end + 1;
    }
  };
  if (s.count == 1 || s.stride <= s.width) {
    push_lines(static_cast<int64_t>(s.start / L_), static_cast<int64_t>((s.end() - 1) / L_));
    return;
  }
  // At least a few queue depths, so that the measured half starts with a full queue.
  const int64_t followed = std::min(s.count, std::max(max_segments, 4 * depth_));
  int64_t prev = -1, misses_half = 0;
  for (int64_t i = 0; i < followed; ++i) {
    if (i == followed / 2) misses_half = misses_;
    const uint64_t a = s.start + i * s.stride;
    int64_t l0 = static_cast<int64_t>(a / L_);
    const int64_t l1 = static_cast<int64_t>((a + s.width - 1) / L_);
    if (l0 == prev) ++l0;  // a line shared with the previous segment joins once
    push_lines(l0, l1);
    prev = l1;
  }
  if (followed < s.count) {
    // The rest of a long regular sweep: the drains per segment of the followed second half.
    const double rate = static_cast<double>(misses_ - misses_half) / (followed - followed / 2);
    misses_ += std::llround(rate * static_cast<double>(s.count - followed));
  }
}

void WriteQueue::drain_all() {
  while (!rows_.empty()) drain_oldest();
}

}  // namespace bertlab::hw

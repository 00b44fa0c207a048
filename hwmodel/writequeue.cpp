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

bool WriteQueue::follow(const Sweep& s, Progress& p) {
  if (s.count <= 0 || s.width <= 0) return true;
  const int64_t per_row = R_ / L_;
  // Consecutive lines of one row (also across segments) join as one run.
  int64_t run_row = -1, run_n = 0;
  auto flush_run = [&] {
    if (run_n == 0) return;
    push_row(run_row, run_n);
    p.pushed += run_n;
    p.runs += 1;
    if (p.half_lines < 0 && 2 * p.runs >= p.limit) {
      p.half_lines = p.pushed;
      p.half_misses = misses_;
    }
    run_n = 0;
  };
  // Lines [l0, l1] in order, split at DRAM row boundaries; false once the limit is reached.
  auto push_lines = [&](int64_t l0, int64_t l1) {
    while (l0 <= l1) {
      const int64_t row = l0 * L_ / R_;
      if (row != run_row) {
        flush_run();
        if (p.runs >= p.limit) return false;
        run_row = row;
      }
      const int64_t end = std::min(l1, (row + 1) * per_row - 1);
      run_n += end - l0 + 1;
      l0 = end + 1;
    }
    return true;
  };
  bool done = true;
  if (s.count == 1 || s.stride <= s.width) {
    done = push_lines(static_cast<int64_t>(s.start / L_), static_cast<int64_t>((s.end() - 1) / L_));
  } else {
    int64_t prev = -1;
    for (int64_t i = 0; i < s.count && done;) {
      const uint64_t a = s.start + i * s.stride;
      const int64_t row = static_cast<int64_t>(a / R_);
      const uint64_t row_end = static_cast<uint64_t>(row + 1) * R_;
      if (a + s.width <= row_end) {
        // Segments i..j lie wholly in this row: their distinct lines are one run (a line
        // shared with the previous segment joins once).
        const int64_t j = std::min<int64_t>(s.count - 1, i + static_cast<int64_t>((row_end - s.width - a) / s.stride));
        const Sweep in_row{a, j - i + 1, s.stride, s.width};
        int64_t n = 0;
        if (s.stride % L_ == 0) {
          // Every segment sits alike in its lines: `k` lines each, one shared with the next
          // segment when the first line of the next is the last of this one.
          const int64_t k = static_cast<int64_t>((a + s.width - 1) / L_ - a / L_ + 1);
          const bool shared = (a + s.width - 1) / L_ == (a + s.stride) / L_;
          n = in_row.count * k - (shared ? in_row.count - 1 : 0);
        } else {
          n = distinct_blocks(in_row, L_);
        }
        if (static_cast<int64_t>(a / L_) == prev) n -= 1;
        if (row != run_row) {
          flush_run();
          if (p.runs >= p.limit) {
            done = false;
            break;
          }
          run_row = row;
        }
        run_n += n;
        prev = static_cast<int64_t>((in_row.end() - 1) / L_);
        i = j + 1;
        continue;
      }
      // A segment across a row boundary: its lines row by row.
      int64_t l0 = static_cast<int64_t>(a / L_);
      const int64_t l1 = static_cast<int64_t>((a + s.width - 1) / L_);
      if (l0 == prev) ++l0;
      done = push_lines(l0, l1);
      prev = l1;
      ++i;
    }
  }
  flush_run();
  return done;
}

void WriteQueue::push(const std::vector<Sweep>& v, int64_t total_lines, int64_t max_runs) {
  // At least a few queue depths, so that the measured half starts with a full queue.
  Progress p;
  p.limit = std::max(max_runs, 4 * depth_);
  for (const auto& s : v)
    if (!follow(s, p)) break;
  if (p.pushed < total_lines && p.half_lines >= 0 && p.pushed > p.half_lines) {
    // The rest of a long regular run of write-backs: the drains per line of the second half.
    const double rate = static_cast<double>(misses_ - p.half_misses) / static_cast<double>(p.pushed - p.half_lines);
    misses_ += std::llround(rate * static_cast<double>(total_lines - p.pushed));
  }
}

void WriteQueue::push(const std::vector<Sweep>& v, int64_t max_runs) {
  int64_t total = 0;
  for (const auto& s : v) total += distinct_blocks(s, L_);
  push(v, total, max_runs);
}

void WriteQueue::drain_all() {
  while (!rows_.empty()) drain_oldest();
}

}  // namespace bertlab::hw

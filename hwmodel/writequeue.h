#pragma once
// The memory controller's write queue of one DRAM request stream, as the trace simulator
// keeps it (tracesim.h): write-backs wait in arrival order; when kWriteQueueLines lines are
// queued, every queued line in the DRAM row of the oldest one is issued together (FR-FCFS
// write drain). A drain opens its row unless the stream's bank still has it open, so the
// row misses of write-backs depend on the order they arrive in, not on their rows alone.
//
// Kept as the queued rows in order of their oldest line, with a line count each (a row's
// lines leave together, so their positions beyond the oldest do not matter): a run of
// lines in one row is one step, the cost is per run and per drain, not per line.
#include <cstdint>
#include <utility>
#include <vector>

#include "hwmodel/layout.h"

namespace bertlab::hw {

class WriteQueue {
 public:
  WriteQueue(int64_t line_bytes, int64_t row_bytes, int64_t depth_lines);
  // `n` write-backs of lines in DRAM row `row`, arriving one after another.
  void push_row(int64_t row, int64_t n);
  // The distinct lines of a sweep, in sweep order. Sweeps of more than `max_segments`
  // segments (and four queue depths) are followed for that many, and the rest is charged at
  // the drain rate of the second half (the queue's state depends only on its last `depth` lines, so a regular
  // sweep settles within a few queue lengths).
  void push(const Sweep& s, int64_t max_segments = 4096);
  // Issues everything still queued (the end of the work), oldest row first.
  void drain_all();
  int64_t row_misses() const { return misses_; }

 private:
  void drain_oldest();
  int64_t L_, R_, depth_;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // (DRAM row, queued lines), oldest first
  int64_t queued_ = 0;
  int64_t open_row_ = -1;
  int64_t misses_ = 0;
};

}  // namespace bertlab::hw

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
  // The distinct lines of the sweeps, in order (`total_lines` of them). Beyond `max_runs`
  // runs of lines in one row (and four queue depths) the rest is charged at the drain rate
  // per line of the followed second half: the queue's state depends only on its last
  // `depth` lines, so regular sweeps settle within a few queue lengths, and the cost per
  // call stays bounded.
  void push(const std::vector<Sweep>& v, int64_t total_lines, int64_t max_runs);
  void push(const std::vector<Sweep>& v, int64_t max_runs = 256);
  void push(const Sweep& s, int64_t max_runs = 256) { push(std::vector<Sweep>{s}, max_runs); }
  // Issues everything still queued (the end of the work), oldest row first.
  void drain_all();
  int64_t row_misses() const { return misses_; }

 private:
  void drain_oldest();
  // Runs and lines followed so far in one push call, and the lines and drains when half of
  // the runs were in.
  struct Progress {
    int64_t limit = 0, runs = 0, pushed = 0, half_lines = -1, half_misses = 0;
  };
  // Pushes the lines of `s` until `p.limit` runs are in; false when it stopped early.
  bool follow(const Sweep& s, Progress& p);
  int64_t L_, R_, depth_;
  std::vector<std::pair<int64_t, int64_t>> rows_;  // (DRAM row, queued lines), oldest first
  int64_t queued_ = 0;
  int64_t open_row_ = -1;
  int64_t misses_ = 0;
};

}  // namespace bertlab::hw

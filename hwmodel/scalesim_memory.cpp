#include "hwmodel/scalesim_memory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "base/error.h"
#include "hwmodel/layout.h"  // ceil_div

namespace bertlab::hw {
namespace {

// Cells (i, j) of an H x W rectangle with i + j < d: the sum over its columns j of
// clamp(d - j, 0, H), written as F(d) - F(d - W) with F(y) = sum over x <= y of clamp(x, 0, H).
int64_t cells_before_diagonal(int64_t H, int64_t W, int64_t d) {
  const auto F = [H](int64_t y) -> int64_t {
    if (y <= 0) return 0;
    if (y <= H) return y * (y + 1) / 2;
    return H * (H + 1) / 2 + (y - H) * H;
  };
  return F(d) - F(d - W);
}

// The order SCALE-Sim's prefetch matrix lists an operand in (compute/systolic_compute_*.py,
// create_*_prefetch_mat): the streamed (skewed) operands by anti-diagonals, the stationary
// operand of WS and IS row by row.
enum class PrefetchOrder : uint8_t { diagonal, row_major };

// A read operand as SCALE-Sim lays it out: its prefetch matrix stacks `groups` slices of
// `group_rows` x `width` cells, one per fold of the array dimension it is mapped on; only the
// last slice can be narrower (`last_width` valid columns, the rest -1 padding).
struct ReadOperand {
  PrefetchOrder order = PrefetchOrder::diagonal;
  int64_t groups = 1, group_rows = 0, width = 0, last_width = 0;
  // Demand rows per fold: diagonal operands stream their slice skewed, after `prefix` empty
  // rows; row-major operands load `block_rows` (the array's rows) slice rows, bottom row first.
  int64_t prefix = 0, block_rows = 0;

  int64_t group_width(int64_t g) const { return g == groups - 1 ? last_width : width; }
  int64_t cells() const { return groups * group_rows * width; }  // prefetch matrix size, padding included
  int64_t valid() const { return (groups - 1) * group_rows * width + group_rows * last_width; }
};

// The addresses one demand row reads: `count` consecutive prefetch positions from `first`.
struct Run {
  int64_t first = 0, count = 0;
};

// Demand row r of a fold that uses slice g (row-major operands: slice rows sub0 .. sub0 +
// sub_rows - 1). A skewed row reads one anti-diagonal of the slice, which is a contiguous run
// in the diagonal prefetch order; a stationary row reads one slice row.
Run demand_run(const ReadOperand& op, int64_t g, int64_t sub0, int64_t sub_rows, int64_t r) {
  const int64_t w = op.group_width(g);
  switch (op.order) {
    case PrefetchOrder::diagonal: {
      // Skew: column c of row r holds slice row r - prefix - c.
      const int64_t c_lo = std::max<int64_t>(0, r - op.prefix - op.group_rows + 1);
      const int64_t c_hi = std::min(w - 1, r - op.prefix);
      if (c_lo > c_hi) return {};
      const int64_t pos = scalesim_diagonal_position(op.groups, op.group_rows, op.width, op.last_width,
                                                     g * op.group_rows + r - op.prefix - c_lo, c_lo);
      return {pos, c_hi - c_lo + 1};
    }
    case PrefetchOrder::row_major: {
      // The block is padded to block_rows rows at the bottom and flipped: row r is block row
      // block_rows - 1 - r; rows past the block are the fold's idle tail.
      if (r >= op.block_rows) return {};
      const int64_t i = op.block_rows - 1 - r;
      if (i >= sub_rows) return {};
      return {g * op.group_rows * op.width + (sub0 + i) * w, w};
    }
  }
  return {};
}

// One double-buffered read SRAM (memory/read_buffer.py). SCALE-Sim hashes the prefetch order
// into "lines" of ceil(size / 100) valid elements; the active half holds a window of lines, and
// a demand for an element outside it slides the window by the prefetch half's lines, which
// the DRAM delivered at a fixed time: each prefetch is requested right after the previous one
// arrived, one request row of `bw` words per cycle plus the port's 1-cycle latency.
class ReadBuffer {
 public:
  ReadBuffer(int64_t sram_kb, int64_t bw, const ReadOperand& op, bool double_count) : double_count_(double_count) {
    const int64_t total = sram_kb * 1024;   // elements (word_size 1)
    const int64_t active = (total + 1) / 2;  // ceil(total * active_buf_frac 0.5)
    const int64_t prefetch = total - active;
    elems_per_line_ = ceil_div(total, 100);
    lines_ = op.valid() / elems_per_line_ + 1;  // the last (partial or empty) line counts too
    active_lines_ = std::min(ceil_div(active, elems_per_line_), lines_);
    prefetch_lines_ = std::min(ceil_div(prefetch, elems_per_line_), lines_ - active_lines_);
    request_rows_ = ceil_div(prefetch, bw);
    bw_ = bw;
    // The first fill: ceil(active / bw) request rows (at most the whole fetch matrix), all
    // arrived by cycle -1.
    dram_words_ = std::min(ceil_div(active, bw), ceil_div(op.cells(), bw)) * bw;
  }

  // Serves one demand row at cycle t; returns its stall (SCALE-Sim: served cycle - t - hit latency).
  int64_t serve(const Run& run, int64_t t) {
    int64_t offset = 1;  // hit latency
    if (run.count == 0) return 0;
    const int64_t last = (run.first + run.count - 1) / elems_per_line_;
    for (int64_t line = run.first / elems_per_line_; line <= last; ++line) {
      while (!in_window(line)) {
        check(prefetch_lines_ > 0, "SCALE-Sim memory: line {} outside a window that cannot move", line);
        slide();
        // The row waits until the prefetch has arrived (read_buffer.service_reads); before
        // 22f88b17 the lateness was added once unconditionally and once more when positive.
        const int64_t late = ready_ - (t + offset);
        if (double_count_) offset += late;
        if (late > 0) offset += late;
      }
    }
    return offset - 1;
  }
  int64_t dram_words() const { return dram_words_; }

 private:
  // The window is lines start .. start + active - 1, wrapping past the last line (lines are
  // always in 0 .. lines - 1).
  bool in_window(int64_t line) const {
    const int64_t ahead = line >= start_ ? line - start_ : line - start_ + lines_;
    return ahead < active_lines_;
  }
  void slide() {  // read_buffer.new_prefetch
    start_ += prefetch_lines_;
    if (start_ >= lines_) start_ -= lines_;  // prefetch_lines < lines
    ready_ += request_rows_ + 1;  // requests at ready+1 .. ready+rows, each served 1 cycle later
    dram_words_ += request_rows_ * bw_;
  }

  bool double_count_;
  int64_t elems_per_line_ = 1, lines_ = 1, active_lines_ = 1, prefetch_lines_ = 0, request_rows_ = 0, bw_ = 1;
  int64_t start_ = 0, ready_ = -1, dram_words_ = 0;
};

// The output SRAM (memory/write_buffer.py): outputs fill lines of `bw` words; once more than
// the drain half is occupied and no drain is under way, the lines written so far (the open
// one closed early) drain, ceil(drain half / bw) lines at one line per cycle, and their words
// are counted free at once (only the -1 padding of a drain's last line is not counted). A
// write that finds the buffer full while a drain is under way waits for its end.
class WriteBuffer {
 public:
  WriteBuffer(int64_t sram_kb, int64_t bw) : bw_(bw) {
    total_ = sram_kb * 1024;
    active_ = (total_ + 1) / 2;
    drain_lines_ = ceil_div(total_ - active_, bw);
    free_ = total_;
  }

  // Writes `count` outputs of the row at cycle t; returns its stall (served cycle - t).
  int64_t serve(int64_t count, int64_t t) {
    int64_t cur = t;
    while (count > 0) {
      // Outputs stored before the next event (SCALE-Sim checks after storing each one).
      const bool draining = cur < drain_end_;
      const int64_t until = draining ? std::max<int64_t>(free_, 1) : std::max<int64_t>(free_ - active_ + 1, 1);
      const int64_t n = std::min(count, until);
      store(n);
      count -= n;
      if (n < until) break;
      if (draining) {
        cur = drain_end_;  // full while draining: wait for the drain to end
      } else {
        close_open_line();
        drain_end_ = drain(cur);
      }
    }
    return cur - t;
  }

  // write_buffer.empty_all_buffers after the last row: the rest drains back to back.
  void drain_rest(int64_t cycle) {
    close_open_line();
    while (drained_ < lines_) cycle = drain(cycle) + 1;
  }
  int64_t dram_words() const { return dram_words_; }

 private:
  void store(int64_t n) {
    free_ -= n;
    fill_ += n;
    lines_ += fill_ / bw_;
    fill_ %= bw_;
  }
  void close_open_line() {
    if (fill_ == 0) return;
    partial_.emplace_back(lines_, fill_);
    ++lines_;
    fill_ = 0;
  }
  int64_t drain(int64_t start) {  // write_buffer.empty_drain_buf; returns the cycle of its last line
    const int64_t end = std::min(drained_ + drain_lines_, lines_);
    check(end > drained_, "SCALE-Sim memory: a write-buffer drain with no lines (SCALE-Sim fails here too)");
    int64_t words = (end - drained_) * bw_;
    while (next_partial_ < partial_.size() && partial_[next_partial_].first < end - 1) ++next_partial_;
    if (next_partial_ < partial_.size() && partial_[next_partial_].first == end - 1)
      words -= bw_ - partial_[next_partial_].second;
    const int64_t last_cycle = start + (end - drained_) - 1;  // write port latency 0
    dram_words_ += words;
    free_ += words;
    drained_ = end;
    return last_cycle;
  }

  int64_t bw_, total_ = 0, active_ = 0, drain_lines_ = 0;
  int64_t free_ = 0, fill_ = 0, lines_ = 0, drained_ = 0, drain_end_ = 0, dram_words_ = 0;
  std::vector<std::pair<int64_t, int64_t>> partial_;  // (line, valid words) of lines closed early
  size_t next_partial_ = 0;
};

// Which slice a fold (fc, fr) reads: the operand's slices follow the row folds or the column folds.
enum class SliceBy : uint8_t { row_fold, col_fold };

struct OperandPlan {
  ReadOperand op;
  SliceBy slice_by = SliceBy::row_fold;
  int64_t sub_rows_total = 0;  // row-major operands: the slice rows the row folds split (Sr)
};

// The output block of a fold, skewed after `prefix` empty rows: `rows` rows of which
// [valid_lo, valid_hi] hold outputs (the rest padding), in `width` valid columns.
struct OutputFold {
  int64_t prefix = 0, rows = 0, valid_lo = 0, valid_hi = 0, width = 0;
  int64_t count(int64_t r) const {  // outputs written by demand row r
    const int64_t c_lo = std::max<int64_t>(0, r - prefix - valid_hi), c_hi = std::min(width - 1, r - prefix - valid_lo);
    return std::max<int64_t>(0, c_hi - c_lo + 1);
  }
};

struct Layout {
  OperandPlan ifmap, filter;
  int64_t Sr = 0, Sc = 0, T = 0, row_folds = 0, col_folds = 0, fold_rows = 0;
};

// SCALE-Sim's mapping of GEMM mode (A = IFMAP M x K, B = FILTER K x N) per dataflow
// (compute/systolic_compute_{ws,os,is}.py): Sr x Sc is the array-mapped extent, T the streamed one.
Layout layout_of(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df) {
  Layout l;
  const auto last = [](int64_t extent, int64_t tile) { return extent - (ceil_div(extent, tile) - 1) * tile; };
  switch (df) {
    case Dataflow::ws:  // A streamed (slices of R columns of K), B stationary
      l.Sr = K, l.Sc = N, l.T = M;
      l.ifmap = {{PrefetchOrder::diagonal, ceil_div(K, R), M, R, last(K, R), R, 0}, SliceBy::row_fold, 0};
      l.filter = {{PrefetchOrder::row_major, ceil_div(N, C), K, C, last(N, C), 0, R}, SliceBy::col_fold, K};
      l.fold_rows = 2 * R + C + M - 2;
      break;
    case Dataflow::os:  // A^T and B both streamed; outputs stationary
      l.Sr = M, l.Sc = N, l.T = K;
      l.ifmap = {{PrefetchOrder::diagonal, ceil_div(M, R), K, R, last(M, R), 0, 0}, SliceBy::row_fold, 0};
      l.filter = {{PrefetchOrder::diagonal, ceil_div(N, C), K, C, last(N, C), 0, 0}, SliceBy::col_fold, 0};
      l.fold_rows = K + R + C - 2;
      break;
    case Dataflow::is:  // A^T stationary, B^T streamed
      l.Sr = K, l.Sc = M, l.T = N;
      l.ifmap = {{PrefetchOrder::row_major, ceil_div(M, C), K, C, last(M, C), 0, R}, SliceBy::col_fold, K};
      l.filter = {{PrefetchOrder::diagonal, ceil_div(K, R), N, R, last(K, R), R, 0}, SliceBy::row_fold, 0};
      l.fold_rows = 2 * R + C + N - 2;
      break;
  }
  l.row_folds = ceil_div(l.Sr, R);
  l.col_folds = ceil_div(l.Sc, C);
  return l;
}

// The output block of fold (fc, fr): OS writes its R x C tile (flipped, padding rows first)
// after the K-1 rows of accumulation; WS and IS write T rows of C outputs after 2R-1 rows.
OutputFold output_fold(const Layout& l, int64_t R, int64_t C, Dataflow df, int64_t fc, int64_t fr) {
  const int64_t width = std::min(C, l.Sc - fc * C);
  switch (df) {
    case Dataflow::os: {
      const int64_t used = std::min(R, l.Sr - fr * R);
      return {l.T - 1, R, R - used, R - 1, width};
    }
    case Dataflow::ws:
    case Dataflow::is: return {2 * R - 1, l.T, 0, l.T - 1, width};
  }
  return {};
}

ScaleSimMemoryResult simulate(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df,
                              const ScaleSimMemoryDesc& mem) {
  const Layout l = layout_of(R, C, M, N, K, df);
  const int64_t bw = mem.bandwidth_words_per_cycle;
  ReadBuffer ifmap(mem.ifmap_sram_kb, bw, l.ifmap.op, mem.stall_double_count);
  ReadBuffer filter(mem.filter_sram_kb, bw, l.filter.op, mem.stall_double_count);
  WriteBuffer ofmap(mem.ofmap_sram_kb, bw);
  const auto run_of = [&](const OperandPlan& p, int64_t fc, int64_t fr, int64_t r) {
    const int64_t g = p.slice_by == SliceBy::row_fold ? fr : fc;
    const int64_t sub0 = fr * R, sub_rows = std::min(R, p.sub_rows_total - sub0);
    return demand_run(p.op, g, sub0, sub_rows, r);
  };
  // double_buffered_scratchpad.service_memory_requests: row i is issued at i + the stalls so
  // far; the array waits for the slowest of the three buffers.
  int64_t row = 0, stalls = 0, last_served = 0;
  for (int64_t fc = 0; fc < l.col_folds; ++fc)
    for (int64_t fr = 0; fr < l.row_folds; ++fr) {
      const OutputFold out = output_fold(l, R, C, df, fc, fr);
      for (int64_t r = 0; r < l.fold_rows; ++r, ++row) {
        const int64_t t = row + stalls;
        const int64_t s_if = ifmap.serve(run_of(l.ifmap, fc, fr, r), t);
        const int64_t s_f = filter.serve(run_of(l.filter, fc, fr, r), t);
        const int64_t s_of = ofmap.serve(out.count(r), t);
        stalls += std::max({s_if, s_f, s_of});
        last_served = t + s_of;
      }
    }
  ofmap.drain_rest(last_served);
  ScaleSimMemoryResult res;
  res.compute_cycles = row - 1;
  res.stall_cycles = stalls;
  res.total_cycles = last_served;  // SCALE-Sim: the cycle the last output row is served
  res.dram_ifmap_reads = ifmap.dram_words();
  res.dram_filter_reads = filter.dram_words();
  res.dram_ofmap_writes = ofmap.dram_words();
  return res;
}

}  // namespace

int64_t scalesim_diagonal_position(int64_t groups, int64_t group_rows, int64_t width, int64_t last_width,
                                   int64_t row, int64_t col) {
  const int64_t rows = groups * group_rows, d = row + col;
  // Cells on earlier diagonals, less the padding cells of the last slice among them.
  int64_t pos = cells_before_diagonal(rows, width, d);
  if (last_width < width)
    pos -= cells_before_diagonal(group_rows, width - last_width, d - (rows - group_rows) - last_width);
  // Cells earlier on this diagonal (larger rows, smaller columns), less the padding ones.
  const int64_t c_first = std::max<int64_t>(0, d - (rows - 1));
  pos += col - c_first;
  const int64_t pad_lo = std::max(c_first, last_width), pad_hi = std::min(col - 1, d - (rows - group_rows));
  if (pad_hi >= pad_lo) pos -= pad_hi - pad_lo + 1;
  return pos;
}

ScaleSimMemoryResult scalesim_memory_gemm(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df,
                                          const ScaleSimMemoryDesc& mem) {
  check(R >= 1 && C >= 1 && M >= 1 && N >= 1 && K >= 1, "SCALE-Sim memory: GEMM {}x{}x{} on a {}x{} array", M, N, K,
        R, C);
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, Dataflow, int64_t, int64_t, int64_t, int64_t, bool>;
  static std::mutex mu;
  static std::map<Key, ScaleSimMemoryResult> cache;  // shared across threads; values never change
  const Key key{R, C, M, N, K, df, mem.ifmap_sram_kb, mem.filter_sram_kb, mem.ofmap_sram_kb,
                mem.bandwidth_words_per_cycle, mem.stall_double_count};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const ScaleSimMemoryResult res = simulate(R, C, M, N, K, df, mem);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, res);
  return res;
}

}  // namespace bertlab::hw

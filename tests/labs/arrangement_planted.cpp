// Lab 3's solution with planted bugs (tests/labs/planted.h).
#include "labs/arrangement/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::arrangement {

using planted::bug;

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t rwma_offset(int64_t row, int64_t col, int64_t /*rows*/, int64_t cols) { return row * cols + col; }

int64_t bwma_offset(int64_t row, int64_t col, int64_t rows, int64_t cols, int64_t S) {
  // Bug: the last panel is not padded to S columns, so its rows are packed narrower.
  if (bug("bwma_last_panel_unpadded")) {
    const int64_t width = (col / S == (cols - 1) / S) ? cols - (col / S) * S : S;
    return (col / S) * rows * S + row * width + col % S;
  }
  return (col / S) * rows * S + row * S + col % S;
}

Lines tile_lines(Layout layout, const Gemm& g) {
  switch (layout) {
    case Layout::rwma:
      // Bug: RWMA's rows counted as if packed together, like BWMA's panel.
      if (bug("rwma_rows_share_lines")) return {ceil_div(g.M * g.S, g.line), ceil_div(g.S * g.S, g.line), ceil_div(g.M * g.S, g.line)};
      return {g.M, g.S, g.M};
    case Layout::bwma:
      return {ceil_div(g.M * g.S, g.line), ceil_div(g.S * g.S, g.line), ceil_div(g.M * g.S, g.line)};
  }
  return {};
}

Lines cold_dram_reads(Layout layout, const Gemm& g) {
  switch (layout) {
    case Layout::rwma:
    case Layout::bwma:
      return {ceil_div(g.M * g.K, g.line), ceil_div(g.K * g.N, g.line), ceil_div(g.M * g.N, g.line)};
  }
  return {};
}

Lines bwma_small_llc_reads(const Gemm& g) {
  const Lines once = cold_dram_reads(Layout::bwma, g);
  // Bug: the cache is assumed to keep A between output panels.
  if (bug("small_llc_keeps_a")) return once;
  return {(g.N / g.S) * once.a, once.w, once.y};
}

std::vector<SpeedupGuess> predicted_speedups() {
  // A student's guesses before the sweep (not graded, drawn on the plots page): BWMA's fewer
  // lines per array step should win more as S grows.
  return {{8, 1, 1.3}, {32, 1, 2.0}, {32, 4, 2.2}};
}

FullModelPrediction full_model_prediction() {
  // Bug: the cache misses taken for what the arrangement changes most.
  if (bug("full_model_l1_most")) return {CoreCost::l1_misses, true};
  return {CoreCost::page_walks, true};
}

}  // namespace bertlab::lab::arrangement

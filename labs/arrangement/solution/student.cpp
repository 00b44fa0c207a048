// Lab 3, the teachers' solution (labs/README.md: remove solution/ from the students' copy).
#include "labs/arrangement/lab.h"

namespace bertlab::lab::arrangement {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

int64_t rwma_offset(int64_t row, int64_t col, int64_t /*rows*/, int64_t cols) { return row * cols + col; }

int64_t bwma_offset(int64_t row, int64_t col, int64_t rows, int64_t /*cols*/, int64_t S) {
  // Panel col / S starts after (col / S) whole panels of rows x S elements.
  return (col / S) * rows * S + row * S + col % S;
}

Lines tile_lines(Layout layout, const Gemm& g) {
  switch (layout) {
    case Layout::rwma:
      // Each row's S columns lie in one line of its own (rows are K or N >= line bytes apart).
      return {g.M, g.S, g.M};
    case Layout::bwma:
      // The A and Y panels' first M rows are M*S contiguous bytes; the W tile S*S of them.
      return {ceil_div(g.M * g.S, g.line), ceil_div(g.S * g.S, g.line), ceil_div(g.M * g.S, g.line)};
  }
  return {};
}

Lines cold_dram_reads(Layout layout, const Gemm& g) {
  switch (layout) {
    case Layout::rwma:
    case Layout::bwma:
      // Both layouts pack a matrix without holes here (S divides K and N): every line once.
      return {ceil_div(g.M * g.K, g.line), ceil_div(g.K * g.N, g.line), ceil_div(g.M * g.N, g.line)};
  }
  return {};
}

Lines bwma_small_llc_reads(const Gemm& g) {
  // A is swept whole once per output panel and is larger than the cache, so every output panel
  // reads all of it again; a W tile is used once; the Y panel stays cached over its k-tiles.
  const Lines once = cold_dram_reads(Layout::bwma, g);
  return {(g.N / g.S) * once.a, once.w, once.y};
}

std::vector<SpeedupGuess> predicted_speedups() {
  // A student's guesses before the sweep (not graded, drawn on the plots page): BWMA's fewer
  // lines per array step should win more as S grows.
  return {{8, 1, 1.3}, {32, 1, 2.0}, {32, 4, 2.2}};
}

FullModelPrediction full_model_prediction() {
  // An array step under RWMA reads S columns of every row of A and Y, rows K and N bytes apart,
  // so it touches many more 4 KB pages than BWMA's contiguous panel: the 64-entry TLB's walks
  // differ most, and these core costs, absent from the array-only model, favour BWMA.
  return {CoreCost::page_walks, true};
}

}  // namespace bertlab::lab::arrangement

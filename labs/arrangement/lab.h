#pragma once
// Lab 3: the functions you write in labs/arrangement/student.cpp (labs/arrangement/README.md).
//
// Every matrix here holds 1-byte elements (int8, as the arrangement paper's accelerator) and
// starts at an address that is a multiple of the cache line. Offsets are in elements (= bytes).
//
// Part A. Where element (row, col) of a rows x cols matrix sits, from the start of the matrix.
//   RWMA (row-wise): rows one after another, each row's columns in order.
//   BWMA (block-wise) at kernel S: the matrix is cut into column panels of S columns (the last
//   one padded to S columns when cols is not a multiple of S). The panels are stored one after
//   another; inside a panel, rows one after another, each row holding the panel's S columns.
//   So a K x N weight is stored as its S x S tiles, one panel of tiles after another.
#include <cstdint>
#include <vector>

#include "base/enum_table.h"

namespace bertlab::lab::arrangement {

int64_t rwma_offset(int64_t row, int64_t col, int64_t rows, int64_t cols);
int64_t bwma_offset(int64_t row, int64_t col, int64_t rows, int64_t cols, int64_t S);

// Part B. Cache lines, by hand. One GEMM Y (M x N) += A (M x K) * W (K x N) on an S x S
// weight-stationary array, every matrix stored in the arrangement asked for. In all the shapes
// the grader gives you, S divides K and N, K and N are multiples of the line size, and S is at
// most the line size (S and the line are powers of two).
enum class Layout { rwma, bwma };

struct Gemm {
  int64_t M, K, N;  // A is M x K, W is K x N, Y is M x N
  int64_t S;        // the array is S x S
  int64_t line;     // bytes per cache line
};

// Distinct cache lines of each operand.
struct Lines {
  int64_t a = 0, w = 0, y = 0;
};

// One step of the array: the first S x S tile of W (rows 0..S-1, columns 0..S-1) is loaded,
// then the first S columns of every row of A stream through the array, and the first S columns
// of every row of Y are read, accumulated and written back. How many distinct lines of A, of W
// and of Y does this step touch?
Lines tile_lines(Layout layout, const Gemm& g);

// The whole GEMM with a cold last-level cache large enough to hold all three matrices: how many
// lines does it read from DRAM, per operand (Y too: a line that is written is first read into
// the cache, write-allocate)?
Lines cold_dram_reads(Layout layout, const Gemm& g);

// The whole GEMM under BWMA with a last-level cache that is too small: it holds 16 KB, room for
// a few panels of A and Y and tiles of W but less than all of A (in the shapes the grader gives
// you, M x K > 16 KB and M x S is a multiple of the line). The BWMA kernel runs, for each output
// panel of S columns of Y, for each k-tile: load the S x S tile of W, stream the k-th panel of A
// (its M rows of S columns), read-modify-write the output panel of Y. The cache keeps the lines
// used most recently (LRU). How many lines does it read from DRAM, per operand?
Lines bwma_small_llc_reads(const Gemm& g);

// Part C (not graded: a record of what you expected). Step 7 asks you to predict the layer
// speedup of BWMA over RWMA (RWMA time / BWMA time) before you run the sweep. Write your guesses
// here, one per (S, cores) you have a guess for (S in 4, 8, 16, 32; cores in 1, 2, 4); the plots
// page draws them beside the model's speedups and the grader prints both. An empty list: no
// predictions.
struct SpeedupGuess {
  int64_t S = 0, cores = 0;
  double speedup = 0;
};
std::vector<SpeedupGuess> predicted_speedups();

// Part D (graded). Step 8 asks, before you run the full model of the paper's system (in-order
// cores that execute the kernels' loop nests and translate every address through a TLB), what
// the arrangement changes most and whether BWMA now gains more. The check compares your answers
// with the full model's whole-graph table at S = 8 and one core
// (docs/hwmodel-paper-table-estimate.md) and with the array-only model of step 7 (the same
// layer, S = 8, one core); the plots page draws the full model's speedup once both are right.
// (An enum class CoreCost { instructions, l1_misses, llc_misses, page_walks }, declared with the
// names the grader prints and each cost's column in that table.)
#define BERTLAB_LAB_CORE_COSTS(X)                                                                 \
  X(instructions, "instructions", "graph speedup - 1: instructions") X(l1_misses, "L1 misses", "L1") \
  X(llc_misses, "LLC misses", "LLC") X(page_walks, "page walks", "TLB")
BERTLAB_ENUM(CoreCost, uint8_t, BERTLAB_LAB_CORE_COSTS)

struct FullModelPrediction {
  CoreCost changes_most = CoreCost::instructions;  // the cost whose cycles BWMA changes most
  bool larger_than_array_model = false;             // BWMA's speedup: larger under the full model?
};
FullModelPrediction full_model_prediction();

}  // namespace bertlab::lab::arrangement

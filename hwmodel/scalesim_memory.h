#pragma once
// SCALE-Sim v2's memory system for one GEMM on one R x C array (its InterfaceBandwidth USER
// mode, scalesim/memory/ at commit 22f88b17): stall cycles and total cycles as SCALE-Sim
// reports them, and its DRAM word counts. The demand and prefetch matrices SCALE-Sim builds
// are never materialised: each demand row is described by the run of prefetch positions it
// reads (one run per operand and row) and the number of outputs it writes, so a GEMM costs
// O(demand rows) with no per-element work. docs/hwmodel.md "SCALE-Sim mode".
#include <cstdint>

#include "hwmodel/system.h"

namespace bertlab::hw {

struct ScaleSimMemoryResult {
  int64_t compute_cycles = 0;  // demand rows - 1: SCALE-Sim's total without stalls
  int64_t stall_cycles = 0;    // SCALE-Sim's "Stall Cycles"
  int64_t total_cycles = 0;    // SCALE-Sim's "Total Cycles" (compute + stalls)
  int64_t dram_ifmap_reads = 0, dram_filter_reads = 0, dram_ofmap_writes = 0;  // words
};

// Y(M x N) = A(M x K) B(K x N) on an R x C array in SCALE-Sim's GEMM mode (A is its IFMAP, B
// its FILTER, Y its OFMAP). Results are cached per distinct argument set (thread-safe), since a
// BERT graph repeats each GEMM shape in every layer.
ScaleSimMemoryResult scalesim_memory_gemm(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df,
                                          const ScaleSimMemoryDesc& mem);

// Position of cell (row, col) in the anti-diagonal order SCALE-Sim prefetches skewed operands
// in (diagonals row + col = 0, 1, ...; each from its largest row down), counting only the
// valid cells of a matrix of `groups` stacked groups of `group_rows` x `width` cells whose
// last group has only `last_width` valid columns. Exposed for its enumeration test.
int64_t scalesim_diagonal_position(int64_t groups, int64_t group_rows, int64_t width, int64_t last_width,
                                   int64_t row, int64_t col);

}  // namespace bertlab::hw

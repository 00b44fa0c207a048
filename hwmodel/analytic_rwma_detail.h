#pragma once
// The parts of the RWMA GEMM's analytic traffic (gemm_rwma, analytic_rwma.cpp), one file per
// reuse question: the weights within and across rounds of sequence blocks
// (analytic_rwma_weights.cpp), the Y and A lines across k-steps, per LLC set
// (analytic_rwma_ksteps.cpp); the A blocks across column tiles and the driver stay in
// analytic_rwma.cpp. Internal to hwmodel's analytic model.
#include <cstdint>
#include <utility>
#include <vector>

#include "hwmodel/analytic_detail.h"

namespace bertlab::hw::analytic_detail {

// Every row of `v` (row-major) in lines of its own, at the same offset in them: row strides
// of whole lines, row 0's last line before row 1's first. Then two column ranges have the
// same lines in every row iff they have in row 0.
inline bool rows_apart(const MatrixView& v, int64_t L) {
  return v.panel_width == 0 && v.row_stride % L == 0 && (v.rows < 2 || v.addr(0, v.cols - 1) / L < v.addr(1, 0) / L);
}
// Whether column tiles t1 and t2 (S columns) of row 0 of `v` lie on the same lines.
inline bool same_tile_lines(const MatrixView& v, int64_t S, int64_t L, int64_t t1, int64_t t2) {
  auto span = [&](int64_t t) {
    const int64_t c0 = t * S, n = std::min(S, v.cols - c0);
    const uint64_t lo = v.addr(0, c0);
    return std::pair<uint64_t, uint64_t>(lo / L, (lo + n * v.elem - 1) / L);
  };
  return t1 == t2 || span(t1) == span(t2);
}

// The weights' DRAM traffic of the whole GEMM (analytic_rwma_weights.cpp).
void rwma_weights(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                  const SystemDesc& s, int64_t P, DramStreams& dram, OperandTraffic& bo);

// Set-resolved caches: the Y and A lines of each core's block (round r, `act` cores) that
// miss from one k-step to the next (kb-1 to kb of a column tile; the last of tile nb-1 to
// the first of nb when they share Y lines), per core in k-step order. The window of the line
// of row i: the previous k-step's A and Y rows after i, the weight tile, the next k-step's A
// and Y rows before i (all blocks of the round), and row i's lines of the other cores on the
// side of the line's core they were touched on. Rows leave and join it one by one, so a
// k-step walked this way costs O(sets + rows x cores); the shortcuts below (steady windows,
// repeated column tiles) give the same lists without walking most k-steps.
struct KStepMisses {
  std::vector<SweepRuns> y, a;
};

// The k-step skip bounds that depend on the round's rows (most lines in a set of A's
// k-tiles kb-1 and kb, and of Y's column tiles nb and nb-1..nb), kept from the first full
// round for the others when full rounds' per-set counts are its rotated (speed only).
// The fullest LLC set of each whole weight tile of one GEMM under a modulo index, by the
// byte of a line its first row starts at (-1: not known yet). A whole tile's rows start at
// addr(kb x S, nb x S) + kr x row stride (row-major weights), so two whole tiles that start at
// the same byte of a line hold the same lines moved by whole lines: their per-set counts are
// rotated and the fullest set is the same, whatever the row stride. Kept for every round of
// the GEMM (speed only).
struct WeightTileBounds {
  std::vector<int32_t> by_offset;
};

struct KStepBounds {
  std::vector<int32_t> max_a;          // per kb (empty: not known yet)
  std::vector<int32_t> y_tile, y_pair;  // per nb (-1: not known yet)
};

// The k-step misses of round r (`act` cores) (analytic_rwma_ksteps.cpp).
KStepMisses rwma_k_steps(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                         const SystemDesc& s, int64_t P, int64_t r, int64_t act, KStepBounds* full,
                         WeightTileBounds& w_tiles);

}  // namespace bertlab::hw::analytic_detail

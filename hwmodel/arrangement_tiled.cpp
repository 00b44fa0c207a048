// The tiled arrangement: every matrix stored as S x S tiles in tile-row-major order, each tile
// row-major (oneDNN-like 2D blocking): neither row-major nor column panels, so its layout is
// only its address function (layout.h). Its GEMM runs BWMA's tile schedule (output panels per
// core, work.h), whose accesses are S-element row pieces, contiguous inside a tile here too.
//
// Its traffic has no closed form yet: the analytic entry runs the exact trace simulator
// (tracesim.h) on this arrangement's own trace, so it equals the simulator by construction and
// costs time in proportion to the accesses (seconds for a BERT-base graph, not milliseconds).
// Row ops on its views are simulated the same way (analytic.cpp). The in-order core model and
// the reference kernels are the paper's (rwma, bwma): an in_order_core system refuses it.
#include <string>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/estimate.h"
#include "hwmodel/layout.h"
#include "hwmodel/tracesim.h"

namespace bertlab::hw::tiled {

// Tile (r / S, c / S) at tile index (r / S) * tiles_per_row + c / S, S * S elements each;
// inside it row r % S, column c % S. Rows and columns padded to multiples of S.
uint64_t address(const Placement& p, int64_t r, int64_t c) {
  const int64_t S = p.S, tiles_per_row = ceil_div(p.cols, S);
  return p.base + (((r / S) * tiles_per_row + c / S) * S * S + (r % S) * S + c % S) * p.elem;
}
int64_t bytes(int64_t rows, int64_t cols, int64_t elem, int64_t S) {
  return ceil_div(rows, S) * S * (ceil_div(cols, S) * S) * elem;
}

void trace_gemm(TraceSim& sim, const GemmWork& w, int64_t P) { bwma::desc.trace_gemm(sim, w, P); }

// No closed form: the exact simulator on this schedule's trace (see the top of the file).
void analytic_gemm(const GemmWork& w, const SystemDesc& s, int64_t cores, analytic_detail::DramStreams&, Traffic& t) {
  TraceSim sim(s, cores);
  trace_gemm(sim, w, cores);
  t = sim.finish();
  for (auto& [name, o] : t.operands) o.why = "simulated exactly (tiled: no closed form yet)";
}

// BWMA's tile schedule: the same tiles, issues and cycles per core (arrangement_bwma.cpp).
void gemm_compute(const GemmWork& w, const GemmShape& gm, const SystemDesc& s, std::vector<double>& per_core,
                  NodeEstimate& n, bool terms) {
  bwma::desc.gemm_compute(w, gm, s, per_core, n, terms);
}

constinit const ArrangementDesc desc = {
    .id = Arrangement::tiled,
    .address = address,
    .bytes = bytes,
    .panel_width = nullptr,
    .transposed_operand = TransposedOperand::tiles_in_array,
    .analytic_gemm = analytic_gemm,
    .trace_gemm = trace_gemm,
    .gemm_compute = gemm_compute,
    .head_split = "free: a head owns whole tiles of each tile row",
    .head_operand = "a head owns whole tiles",
    .head_concat = "free: tiles",
    .transpose = "S x S tiles moved whole",
    .row_access = "each row gathered from the tiles of its tile row (strided)",
    .rows_gathered = "gathered from the tiles of a tile row",
    .rows_scattered = "scattered into the tiles of a tile row",
    .transposed_dy = "read as S x S tiles of dy, transposed on the way into the array",
    .transposed_ll = "the (L,L) operand transposed tile by tile",
};

}  // namespace bertlab::hw::tiled

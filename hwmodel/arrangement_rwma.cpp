// The row-wise arrangement (RWMA): every matrix row-major (layout.h); the GEMM schedule
// gives each core whole sequence blocks (work.h). Its row of the arrangement table
// (desc, at the end) points here; the analytic traffic of one product is gemm_rwma
// (analytic_rwma.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/compute.h"
#include "hwmodel/estimate.h"
#include "hwmodel/layout.h"
#include "hwmodel/tracesim.h"

namespace bertlab::hw::rwma {

// Row-major: element (r, c) at r * cols + c elements from the base.
uint64_t address(const Placement& p, int64_t r, int64_t c) { return p.base + (r * p.cols + c) * p.elem; }
int64_t bytes(int64_t rows, int64_t cols, int64_t elem, int64_t) { return rows * cols * elem; }
// Its panel form: no panels.
int64_t panel_width(int64_t) { return 0; }

void analytic_gemm(const GemmWork& w, const SystemDesc& s, int64_t cores, analytic_detail::DramStreams& dram,
                   Traffic& t) {
  for (const auto& inst : w.instances) analytic_detail::gemm_rwma(w, inst[0], inst[1], inst[2], s, cores, dram, t);
}

void trace_gemm(TraceSim& sim, const GemmWork& w, int64_t P) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S;
  const int A = sim.operand(w.a_name), B = sim.operand(w.b_name), Y = sim.operand(w.y_name);
  for (const auto& inst : w.instances) {
    const MatrixView &a = inst[0], &b = inst[1], &y = inst[2];
    const int64_t e = a.elem;
    auto width = [&](const MatrixView& v, int64_t c) { return std::min(S, v.cols - c) * e; };
    auto load_tile = [&](int64_t core, int64_t kb, int64_t nb) {
      for (int64_t kr = 0; kr < S && kb * S + kr < b.rows; ++kr)
        sim.access(core, B, b.addr(kb * S + kr, nb * S), width(b, nb * S), false);
    };
    {
      const int64_t Mb = w.block_rows, MB = ceil_div(w.m, Mb);
      for (int64_t r = 0; r * P < MB; ++r) {
        const int64_t active = std::min(P, MB - r * P);
        for (int64_t nb = 0; nb < NT; ++nb)
          for (int64_t kb = 0; kb < KT; ++kb) {
            for (int64_t c = 0; c < active; ++c) load_tile(c, kb, nb);
            for (int64_t i = 0; i < Mb; ++i)
              for (int64_t c = 0; c < active; ++c) {
                const int64_t m = (r * P + c) * Mb + i;
                if (m >= w.m) continue;
                sim.access(c, A, a.addr(m, kb * S), width(a, kb * S), false);
                sim.access(c, Y, y.addr(m, nb * S), width(y, nb * S), true);
              }
          }
      }
    }
  }
}

// Array cycles: sequence blocks round-robin over the cores; every block runs all tiles of
// every product, each tile streaming the block's rows (compute.h tile_cost).
void gemm_compute(const GemmWork& w, const GemmShape& gm, const SystemDesc& s, std::vector<double>& per_core,
                  NodeEstimate& n, bool terms) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, P = s.cores, inst = static_cast<int64_t>(w.instances.size());
  const int64_t Mb = w.block_rows, MB = ceil_div(gm.m, Mb);
  for (int64_t blk = 0; blk < MB; ++blk) {
    const TileCost tc = tile_cost(s, std::min(Mb, gm.m - blk * Mb));
    per_core[blk % P] += inst * NT * KT * tc.cycles(s.array);
    n.issues += static_cast<int64_t>(inst * NT * KT * (tc.weight_issues + tc.stream_issues + tc.output_issues));
  }
  n.tiles = inst * NT * KT * MB;
  if (terms)
    n.terms.push_back(fmt::format(
        "compute: {} sequence block(s) of {} rows split over {} core(s); every block reloads all {} "
        "weight tiles and pays {} rows of fill/drain per tile",
        MB, Mb, P, NT * KT, 2 * S - 1));
}

constinit const ArrangementDesc desc = {
    .id = Arrangement::rwma,
    .address = address,
    .bytes = bytes,
    .panel_width = panel_width,
    .transposed_operand = TransposedOperand::converted_copy,
    .analytic_gemm = analytic_gemm,
    .trace_gemm = trace_gemm,
    .gemm_compute = gemm_compute,
    .head_split = "by strided rows",
    .head_operand = "strided rows",
    .head_concat = "strided rows",
    .transpose = "row-major transpose",
    .row_access = "each row contiguous",
    .rows_gathered = "read contiguously",
    .rows_scattered = "as a contiguous row",
    .transposed_dy = "from a row-major transposed copy (conversion node)",
    .transposed_ll = "the (L,L) operand transposed into a row-major copy first",
};

}  // namespace bertlab::hw::rwma

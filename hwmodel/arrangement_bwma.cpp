// The block-wise arrangement (BWMA): every matrix stored as column panels of width S
// (layout.h); the GEMM schedule gives each core its output panels (work.h). Its row of the
// arrangement table (desc, at the end) points here; the analytic traffic of one product is
// gemm_bwma (analytic_bwma.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/compute.h"
#include "hwmodel/estimate.h"
#include "hwmodel/layout.h"
#include "hwmodel/tracesim.h"

namespace bertlab::hw::bwma {

// Column panels of S columns, each rows x S row-major: element (r, c) in panel c / S, row r,
// column c % S of it; the columns padded to a multiple of S.
uint64_t address(const Placement& p, int64_t r, int64_t c) {
  return p.base + ((c / p.S) * p.rows * p.S + r * p.S + c % p.S) * p.elem;
}
int64_t bytes(int64_t rows, int64_t cols, int64_t elem, int64_t S) { return rows * (ceil_div(cols, S) * S) * elem; }
// Its panel form: panels of S columns.
int64_t panel_width(int64_t S) { return S; }

// Products with fewer output panels than cores run several at once on groups of cores
// (work.h bwma_groups): product i on group i mod groups.
void analytic_gemm(const GemmWork& w, const SystemDesc& s, int64_t cores, analytic_detail::DramStreams& dram,
                   Traffic& t) {
  const BwmaGroups grp = bwma_groups(w, cores);
  for (size_t i = 0; i < w.instances.size(); ++i) {
    const auto& inst = w.instances[i];
    analytic_detail::gemm_bwma(w, inst[0], inst[1], inst[2], s, grp.cores, dram, t,
                               grp.first_core(static_cast<int64_t>(i)));
  }
}

void trace_gemm(TraceSim& sim, const GemmWork& w, int64_t P) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S;
  const int A = sim.operand(w.a_name), B = sim.operand(w.b_name), Y = sim.operand(w.y_name);
  // Products run `groups` at a time on disjoint groups of cores, in lock step (work.h).
  const BwmaGroups grp = bwma_groups(w, P);
  const int64_t Pc = grp.cores, n_inst = static_cast<int64_t>(w.instances.size());
  for (int64_t i0 = 0; i0 < n_inst; i0 += grp.groups) {
    const int64_t G = std::min(grp.groups, n_inst - i0);
    auto width = [&](const MatrixView& v, int64_t c) { return std::min(S, v.cols - c) * v.elem; };
    for (int64_t r = 0; r * Pc < NT; ++r) {
      const int64_t active = std::min(Pc, NT - r * Pc);
      for (int64_t kb = 0; kb < KT; ++kb) {
        for (int64_t g = 0; g < G; ++g) {
          const MatrixView& b = w.instances[i0 + g][1];
          for (int64_t c = 0; c < active; ++c)
            for (int64_t kr = 0; kr < S && kb * S + kr < b.rows; ++kr)
              sim.access(g * Pc + c, B, b.addr(kb * S + kr, (r * Pc + c) * S), width(b, (r * Pc + c) * S), false);
        }
        for (int64_t m = 0; m < w.m; ++m)
          for (int64_t g = 0; g < G; ++g) {
            const MatrixView &a = w.instances[i0 + g][0], &y = w.instances[i0 + g][2];
            for (int64_t c = 0; c < active; ++c) {
              const int64_t nb = r * Pc + c;
              sim.access(g * Pc + c, A, a.addr(m, kb * S), width(a, kb * S), false);
              sim.access(g * Pc + c, Y, y.addr(m, nb * S), width(y, nb * S), true);
            }
          }
      }
    }
  }
}

// Array cycles: each core runs its output panels, every panel all K/S tiles, each tile
// streaming all M rows (compute.h tile_cost).
void gemm_compute(const GemmWork& w, const GemmShape& gm, const SystemDesc& s, std::vector<double>& per_core,
                  NodeEstimate& n, bool terms) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, P = s.cores, inst = static_cast<int64_t>(w.instances.size());
  const TileCost tc = tile_cost(s, gm.m);
  const BwmaGroups grp = bwma_groups(w, P);
  for (int64_t i = 0; i < inst; ++i)
    for (int64_t c = 0; c < grp.cores; ++c) {
      const int64_t panels = NT / grp.cores + (c < NT % grp.cores ? 1 : 0);
      per_core[grp.first_core(i) + c] += panels * KT * tc.cycles(s.array);
    }
  n.tiles = inst * NT * KT;
  n.issues = static_cast<int64_t>(n.tiles * (tc.weight_issues + tc.stream_issues + tc.output_issues));
  if (terms)
    n.terms.push_back(fmt::format(
        "compute: output panels split over {} core(s){}; per tile {:.0f} weight issues + {:.0f} stream issues "
        "({} rows + {} fill/drain) + {:.0f} output issues",
        P,
        grp.groups > 1 ? fmt::format(" ({} products at a time, {} panel(s) each on {} core(s))", grp.groups, NT, grp.cores)
                       : std::string(),
        tc.weight_issues, tc.stream_issues, gm.m, 2 * S - 1, tc.output_issues));
}

constinit const ArrangementDesc desc = {
    .id = Arrangement::bwma,
    .address = address,
    .bytes = bytes,
    .panel_width = panel_width,
    .transposed_operand = TransposedOperand::tiles_in_array,
    .analytic_gemm = analytic_gemm,
    .trace_gemm = trace_gemm,
    .gemm_compute = gemm_compute,
    .head_split = "free: a head owns its panels",
    .head_operand = "a head owns its panels",
    .head_concat = "free: panels",
    .transpose = "S x S tiles moved whole",
    .row_access = "each row gathered from its column panels (strided)",
    .rows_gathered = "gathered from the column panels",
    .rows_scattered = "scattered into the column panels",
    .transposed_dy = "read as S x S tiles of dy's panels, transposed on the way into the array",
    .transposed_ll = "the (L,L) operand transposed tile by tile",
};

}  // namespace bertlab::hw::bwma

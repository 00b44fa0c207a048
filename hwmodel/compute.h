#pragma once
// Cycles of the systolic array itself: the tightly coupled array of the arrangement paper
// (fed through the core, one issue per bytes_per_issue bytes) and SCALE-Sim's closed forms.
#include <cstdint>
#include <vector>

#include "hwmodel/system.h"

namespace bertlab::hw {

// SCALE-Sim (v2) compute for one GEMM Y(M x N) = A(M x K) B(K x N) on an R x C array.
// Operand matrices as SCALE-Sim maps them: OS: Sr = M, Sc = N, T = K; WS: Sr = K, Sc = N,
// T = M; IS: Sr = K, Sc = M, T = N. Folds = ceil(Sr/R) * ceil(Sc/C).
// cycles: what SCALE-Sim reports as the layer's total (no stalls): the index of the cycle in
// which the last output is written, its demand-matrix rows counted from 0, i.e. rows - 1.
// ofmap_writes: the outputs written; SCALE-Sim's OS report adds the padded fold's R + C per
// fold to its count (reported_ofmap_writes), its WS and IS reports do not.
struct ScaleSimCounts {
  int64_t folds = 0, rows = 0, cycles = 0;
  int64_t ifmap_reads = 0, filter_reads = 0, ofmap_writes = 0;  // SRAM accesses (elements)
  int64_t reported_ofmap_writes = 0;
};
ScaleSimCounts scalesim_gemm(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df);

// `products` GEMMs of one shape on P cores, each core with its own R x C array, in SCALE-Sim
// mode: the independent folds are split over the cores (OS: every fold; WS and IS: the
// column folds, whose row folds accumulate into the same outputs and stay on one core);
// with fewer such units than cores, WS and IS also split the streamed rows T (independent
// outputs; OS streams the reduction and does not). Returns each core's reported cycles.
std::vector<int64_t> scalesim_per_core(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df,
                                       int64_t products, int64_t P);

// Issue model of the tightly coupled weight-stationary array (TiC-SAT): per S x S tile,
// load S*S*e bytes of weights, stream `rows` input rows plus 2S-1 rows of fill/drain, and
// pop and accumulate `rows` output rows of S elements.
struct TileCost {
  double weight_issues = 0, stream_issues = 0, output_issues = 0;
  double cycles(const ArrayDesc& a) const {
    return (weight_issues + stream_issues) * a.cycles_per_issue + output_issues * a.output_cycles_per_issue;
  }
};
TileCost tile_cost(const SystemDesc& s, int64_t rows);

}  // namespace bertlab::hw

#include "hwmodel/compute.h"

namespace bertlab::hw {

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

ScaleSimCounts scalesim_gemm(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df) {
  ScaleSimCounts c;
  switch (df) {
    case Dataflow::os: {
      // Per fold: T rows of operands, C-1 rows for the outputs to drain, R-1 rows of skew.
      const int64_t rf = ceil_div(M, R), cf = ceil_div(N, C);
      c.folds = rf * cf;
      c.cycles = c.folds * (K + R + C - 2);
      c.ifmap_reads = cf * M * K;   // A is re-streamed for every column fold
      c.filter_reads = rf * K * N;  // B is re-streamed for every row fold
      c.ofmap_writes = M * N;       // each output leaves the array once
      break;
    }
    case Dataflow::ws: {
      // Per fold: R rows to load the weights, T rows of inputs, C-1 to drain, R-1 of skew.
      const int64_t rf = ceil_div(K, R), cf = ceil_div(N, C);
      c.folds = rf * cf;
      c.cycles = c.folds * (2 * R + C + M - 2);
      c.ifmap_reads = cf * M * K;   // inputs streamed once per column fold
      c.filter_reads = K * N;       // each weight loaded once
      c.ofmap_writes = rf * M * N;  // partial sums written once per row fold
      break;
    }
    case Dataflow::is: {
      const int64_t rf = ceil_div(K, R), cf = ceil_div(M, C);
      c.folds = rf * cf;
      c.cycles = c.folds * (2 * R + C + N - 2);
      c.ifmap_reads = M * K;        // each input loaded once (stationary)
      c.filter_reads = cf * K * N;  // weights streamed once per column fold
      c.ofmap_writes = rf * M * N;  // partial sums written once per row fold
      break;
    }
  }
  return c;
}

TileCost tile_cost(const SystemDesc& s, int64_t rows) {
  const double S = static_cast<double>(s.array.kernel), e = static_cast<double>(s.elem_bytes);
  const double bpi = static_cast<double>(s.array.bytes_per_issue);
  TileCost t;
  t.weight_issues = S * S * e / bpi;                 // weight tile load
  t.stream_issues = (rows + 2 * S - 1) * S * e / bpi;  // rows plus fill and drain
  t.output_issues = rows * S * e / bpi;              // outputs popped and accumulated
  return t;
}

}  // namespace bertlab::hw

#include "hwmodel/compute.h"

#include "hwmodel/layout.h"  // ceil_div

namespace bertlab::hw {

ScaleSimCounts scalesim_gemm(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df) {
  ScaleSimCounts c;
  switch (df) {
    case Dataflow::os: {
      // Per fold: T rows of operands, C-1 rows for the outputs to drain, R-1 rows of skew.
      const int64_t rf = ceil_div(M, R), cf = ceil_div(N, C);
      c.folds = rf * cf;
      c.rows = c.folds * (K + R + C - 2);
      c.ifmap_reads = cf * M * K;   // A is re-streamed for every column fold
      c.filter_reads = rf * K * N;  // B is re-streamed for every row fold
      c.ofmap_writes = M * N;       // each output leaves the array once
      // SCALE-Sim's OS demand matrix adds the padded fold's height + width per fold.
      c.reported_ofmap_writes = c.ofmap_writes + c.folds * (R + C);
      c.cycles = c.rows - 1;
      return c;
    }
    case Dataflow::ws: {
      // Per fold: R rows to load the weights, T rows of inputs, C-1 to drain, R-1 of skew.
      const int64_t rf = ceil_div(K, R), cf = ceil_div(N, C);
      c.folds = rf * cf;
      c.rows = c.folds * (2 * R + C + M - 2);
      c.ifmap_reads = cf * M * K;   // inputs streamed once per column fold
      c.filter_reads = K * N;       // each weight loaded once
      c.ofmap_writes = rf * M * N;  // partial sums written once per row fold
      break;
    }
    case Dataflow::is: {
      const int64_t rf = ceil_div(K, R), cf = ceil_div(M, C);
      c.folds = rf * cf;
      c.rows = c.folds * (2 * R + C + N - 2);
      c.ifmap_reads = M * K;        // each input loaded once (stationary)
      c.filter_reads = cf * K * N;  // weights streamed once per column fold
      c.ofmap_writes = rf * M * N;  // partial sums written once per row fold
      break;
    }
  }
  c.reported_ofmap_writes = c.ofmap_writes;
  c.cycles = c.rows - 1;
  return c;
}

std::vector<int64_t> scalesim_per_core(int64_t R, int64_t C, int64_t M, int64_t N, int64_t K, Dataflow df,
                                       int64_t products, int64_t P) {
  // Per dataflow: the streamed extent T and the extent Sc the column folds cover.
  const bool os = df == Dataflow::os;
  const int64_t Sr = os ? M : K, Sc = df == Dataflow::is ? M : N, T = os ? K : df == Dataflow::ws ? M : N;
  const int64_t rf = ceil_div(Sr, R), cf = ceil_div(Sc, C);
  // Independent units: OS every fold, WS/IS each column fold with its row folds.
  const int64_t units = products * cf * (os ? rf : 1), folds_per_unit = os ? 1 : rf;
  // Fewer units than cores: WS and IS split the streamed rows T of every unit over
  // `split` cores (each fold then streams ceil(T / split) rows).
  const int64_t split = (!os && units < P) ? std::min(T, P / units) : 1;
  const int64_t T_core = ceil_div(T, split);
  const int64_t fold_rows = os ? T + R + C - 2 : 2 * R + C + T_core - 2;
  std::vector<int64_t> per_core(P, 0);
  const int64_t workers = std::min(P, units * split);
  for (int64_t c = 0; c < workers; ++c) {
    const int64_t mine = split > 1 ? 1 : even_share(units, P, c);
    per_core[c] = mine * folds_per_unit * fold_rows - 1;  // reported as SCALE-Sim counts: rows - 1
  }
  return per_core;
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

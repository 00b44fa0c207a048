#include "ops/peak.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "ops/dnnl_context.h"

namespace bertlab::ops {

PeakResult measure_matmul_peak(bool bf16, double seconds, int n) {
  using dnnl::memory;
  auto& ctx = dnnl_context();
  auto in_dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  memory::desc a({n, n}, in_dt, memory::format_tag::ab);
  memory::desc b_any({n, n}, in_dt, memory::format_tag::any);
  memory::desc c({n, n}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), ctx.engine);
  dnnl::matmul prim(pd);
  memory ma(a, ctx.engine), mb(pd.weights_desc(), ctx.engine), mc(c, ctx.engine);
  // Inputs are left as allocated: timing does not depend on the values (no denormal inputs
  // since fresh pages are zero).
  auto once = [&] {
    prim.execute(ctx.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    ctx.stream.wait();
  };
  once();  // warm-up: JIT and page faults
  std::vector<double> rates;
  const double flops = 2.0 * n * n * double(n);
  auto start = std::chrono::steady_clock::now();
  do {
    auto t0 = std::chrono::steady_clock::now();
    once();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(flops / dt / 1e9);
  } while (rates.size() < 3 ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds);
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return {rates[rates.size() / 2], n};
}

}  // namespace bertlab::ops

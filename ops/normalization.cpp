#include "ops/normalization.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/dnnl_context.h"
#include "ops/eigen_ref.h"
#include "ops/parallel.h"

namespace bertlab::ops {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

void layernorm_forward_reference(float* y, const float* x, const float* gamma, const float* beta,
                                 int64_t rows, int64_t H, float eps) {
  ref::MatD xc = ref::load(x, rows, H);
  xc.colwise() -= ref::ColD(xc.rowwise().mean());                             // x - mean
  ref::ColD rstd = (xc.array().square().rowwise().mean() + double(eps)).rsqrt();  // 1/sqrt(var+eps)
  ref::MatD xhat = rstd.asDiagonal() * xc;
  ref::store(y, (xhat.array().rowwise() * ref::load_row(gamma, H).array()).rowwise() +
                    ref::load_row(beta, H).array(), H);
}

LayerNorm::LayerNorm(int64_t rows, int64_t H, float eps) {
  auto& ctx = dnnl_context();
  memory::desc data({rows, H}, dt::f32, tag::ab);
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  pd_ = dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, data, eps, flags),
      scratchpad_attr(), ctx.engine);
  prim_ = dnnl::layer_normalization_forward(pd_);
}

void LayerNorm::forward(float* y, const float* x, const float* gamma, const float* beta) const {
  memory::desc vec({pd_.src_desc().dims()[1]}, dt::f32, tag::a);
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), x},
                        {DNNL_ARG_DST, pd_.dst_desc(), y},
                        {DNNL_ARG_SCALE, vec, gamma},
                        {DNNL_ARG_SHIFT, vec, beta}});
}

void softmax_forward_reference(float* y, const float* x, int64_t rows, int64_t L) {
  ref::MatD z = ref::load(x, rows, L);
  z.colwise() -= ref::ColD(z.rowwise().maxCoeff());  // shift by the row maximum
  ref::MatD e = z.array().exp().matrix();
  ref::store(y, e.array().colwise() / e.array().rowwise().sum(), L);
}

Softmax::Softmax(int64_t rows, int64_t L) {
  auto& ctx = dnnl_context();
  memory::desc data({rows, L}, dt::f32, tag::ab);
  pd_ = dnnl::softmax_forward::primitive_desc(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, data, 1), scratchpad_attr(), ctx.engine);
  prim_ = dnnl::softmax_forward(pd_);
}

void Softmax::forward(float* y, const float* x) const {
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), x}, {DNNL_ARG_DST, pd_.dst_desc(), y}});
#if defined(__aarch64__)
  // oneDNN 2.6's aarch64 JIT exp clamps its argument at ln(FLT_MIN) and returns FLT_MIN below
  // it, where its x86 JIT returns 0: a masked key (bias -FLT_MAX) would get FLT_MIN / sum, not
  // the probability 0. Every true value below FLT_MIN is in the denormal range, which the x86
  // kernels flush to 0 too; doing the same here gives masked keys exactly 0 on both ISAs.
  constexpr float kMin = std::numeric_limits<float>::min();
  const auto n = static_cast<int64_t>(pd_.dst_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i)
    if (y[i] < kMin) y[i] = 0.f;
#endif
}

}  // namespace bertlab::ops

namespace bertlab::ops {

namespace {
// One row of the layernorm backward; accumulates dgamma/dbeta into the given partial sums.
template <typename Acc>
void layernorm_backward_row(float* dx, Acc* dgamma, Acc* dbeta, const float* dy, const float* x,
                            const float* gamma, int64_t H, float eps) {
  // The sums are SIMD reductions (omp simd: lane-wise partial sums, then combined), which GCC
  // does not vectorise on its own without -ffast-math; the order is fixed for a given build,
  // so runs stay bit-for-bit repeatable.
  Acc mean = 0, var = 0;
#pragma omp simd reduction(+ : mean)
  for (int64_t i = 0; i < H; ++i) mean += x[i];
  mean /= H;
#pragma omp simd reduction(+ : var)
  for (int64_t i = 0; i < H; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= H;
  const Acc rstd = Acc(1) / std::sqrt(var + eps);
  Acc sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
  for (int64_t i = 0; i < H; ++i) {
    Acc xhat = (x[i] - mean) * rstd, dxhat = Acc(dy[i]) * gamma[i];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
    dgamma[i] += Acc(dy[i]) * xhat;
    dbeta[i] += dy[i];
  }
  sum_dxhat /= H;
  sum_dxhat_xhat /= H;
#pragma omp simd
  for (int64_t i = 0; i < H; ++i) {
    Acc xhat = (x[i] - mean) * rstd, dxhat = Acc(dy[i]) * gamma[i];
    dx[i] = static_cast<float>(rstd * (dxhat - sum_dxhat - xhat * sum_dxhat_xhat));
  }
}
}  // namespace

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, int64_t rows, int64_t H, float eps,
                        std::vector<float>& scratch) {
  // Per-thread parts hold dgamma then dbeta of a block of rows.
  ordered_row_sums(
      rows, 2 * H, scratch,
      [&](int64_t begin, int64_t end, float* part) {
        for (int64_t r = begin; r < end; ++r)
          layernorm_backward_row(dx + r * H, part, part + H, dy + r * H, x + r * H, gamma, H, eps);
      },
      [&](const float* part) {
        for (int64_t i = 0; i < H; ++i) dgamma[i] += part[i], dbeta[i] += part[H + i];
      });
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, int64_t rows, int64_t H, float eps) {
  std::vector<float> scratch;
  layernorm_backward(dx, dgamma, dbeta, dy, x, gamma, rows, H, eps, scratch);
}

void layernorm_backward_reference(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, int64_t rows, int64_t H,
                                  float eps) {
  // With xhat = (x - mean) rstd and g = dy * gamma:
  // dx = rstd (g - mean(g) - xhat mean(g xhat)); dgamma += Σ_rows dy xhat; dbeta += Σ_rows dy.
  ref::MatD xc = ref::load(x, rows, H), g_dy = ref::load(dy, rows, H);
  xc.colwise() -= ref::ColD(xc.rowwise().mean());
  ref::ColD rstd = (xc.array().square().rowwise().mean() + double(eps)).rsqrt();
  ref::MatD xhat = rstd.asDiagonal() * xc;
  ref::MatD g = (g_dy.array().rowwise() * ref::load_row(gamma, H).array()).matrix();
  ref::ColD mean_g = g.rowwise().mean(), mean_gx = (g.array() * xhat.array()).rowwise().mean();
  g.colwise() -= mean_g;
  g -= (xhat.array().colwise() * mean_gx.array()).matrix();
  ref::store(dx, rstd.asDiagonal() * g, H);
  ref::accumulate(dgamma, (g_dy.array() * xhat.array()).colwise().sum().matrix(), H);
  ref::accumulate(dbeta, g_dy.colwise().sum(), H);
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t L) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) softmax_backward_row(dx + r * L, dy + r * L, y + r * L, L);
}

void softmax_backward_reference(float* dx, const float* dy, const float* y, int64_t rows,
                                int64_t L) {
  ref::MatD g = ref::load(dy, rows, L), p = ref::load(y, rows, L);
  ref::ColD dot = (g.array() * p.array()).rowwise().sum();  // Σ dy y per row
  ref::store(dx, p.array() * (g.array().colwise() - dot.array()), L);
}

}  // namespace bertlab::ops

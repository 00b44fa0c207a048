#include "ops/normalization.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/dnnl_context.h"
#include "ops/parallel.h"

namespace bertlab::ops {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

void layernorm_forward_reference(float* y, const float* x, const float* gamma, const float* beta,
                                 int64_t rows, int64_t H, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * H;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < H; ++i) mean += xr[i];
    mean /= H;
    for (int64_t i = 0; i < H; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= H;
    double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < H; ++i)
      y[r * H + i] = static_cast<float>((xr[i] - mean) * rstd * gamma[i] + beta[i]);
  }
}

LayerNorm::LayerNorm(int64_t rows, int64_t H, float eps) {
  auto& ctx = dnnl_context();
  memory::desc data({rows, H}, dt::f32, tag::ab);
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  pd_ = dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, data, eps, flags),
      ctx.engine);
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * L;
    float mx = *std::max_element(xr, xr + L);
    double sum = 0;
    for (int64_t i = 0; i < L; ++i) sum += std::exp(double(xr[i]) - mx);
    for (int64_t i = 0; i < L; ++i)
      y[r * L + i] = static_cast<float>(std::exp(double(xr[i]) - mx) / sum);
  }
}

Softmax::Softmax(int64_t rows, int64_t L) {
  auto& ctx = dnnl_context();
  memory::desc data({rows, L}, dt::f32, tag::ab);
  pd_ = dnnl::softmax_forward::primitive_desc(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, data, 1), ctx.engine);
  prim_ = dnnl::softmax_forward(pd_);
}

void Softmax::forward(float* y, const float* x) const {
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), x}, {DNNL_ARG_DST, pd_.dst_desc(), y}});
}

}  // namespace bertlab::ops

namespace bertlab::ops {

namespace {
// One row of the layernorm backward; accumulates dgamma/dbeta into the given partial sums.
template <typename Acc>
void layernorm_backward_row(float* dx, Acc* dgamma, Acc* dbeta, const float* dy, const float* x,
                            const float* gamma, int64_t H, float eps) {
  Acc mean = 0, var = 0;
  for (int64_t i = 0; i < H; ++i) mean += x[i];
  mean /= H;
  for (int64_t i = 0; i < H; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= H;
  const Acc rstd = Acc(1) / std::sqrt(var + eps);
  Acc sum_dxhat = 0, sum_dxhat_xhat = 0;
  for (int64_t i = 0; i < H; ++i) {
    Acc xhat = (x[i] - mean) * rstd, dxhat = Acc(dy[i]) * gamma[i];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
    dgamma[i] += Acc(dy[i]) * xhat;
    dbeta[i] += dy[i];
  }
  sum_dxhat /= H;
  sum_dxhat_xhat /= H;
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
  std::vector<double> dg(H, 0.0), db(H, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    layernorm_backward_row(dx + r * H, dg.data(), db.data(), dy + r * H, x + r * H, gamma, H, eps);
  for (int64_t i = 0; i < H; ++i) dgamma[i] += float(dg[i]), dbeta[i] += float(db[i]);
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t L) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *dyr = dy + r * L, *yr = y + r * L;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t i = 0; i < L; ++i) dot += dyr[i] * yr[i];
    float* dxr = dx + r * L;
#pragma omp simd
    for (int64_t i = 0; i < L; ++i) dxr[i] = yr[i] * (dyr[i] - dot);
  }
}

void softmax_backward_reference(float* dx, const float* dy, const float* y, int64_t rows,
                                int64_t L) {
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (int64_t i = 0; i < L; ++i) dot += double(dy[r * L + i]) * y[r * L + i];
    for (int64_t i = 0; i < L; ++i)
      dx[r * L + i] = static_cast<float>(y[r * L + i] * (dy[r * L + i] - dot));
  }
}

}  // namespace bertlab::ops

#include "ops/normalization.h"

#include <algorithm>
#include <cmath>

#include "ops/dnnl_context.h"

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
  auto& ctx = dnnl_context();
  memory::desc vec({pd_.src_desc().dims()[1]}, dt::f32, tag::a);
  prim_.execute(ctx.stream, {{DNNL_ARG_SRC, wrap(pd_.src_desc(), x)},
                             {DNNL_ARG_DST, wrap(pd_.dst_desc(), y)},
                             {DNNL_ARG_SCALE, wrap(vec, gamma)},
                             {DNNL_ARG_SHIFT, wrap(vec, beta)}});
  ctx.stream.wait();
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
  auto& ctx = dnnl_context();
  prim_.execute(ctx.stream,
                {{DNNL_ARG_SRC, wrap(pd_.src_desc(), x)}, {DNNL_ARG_DST, wrap(pd_.dst_desc(), y)}});
  ctx.stream.wait();
}

}  // namespace bertlab::ops

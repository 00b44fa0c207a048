#include "ops/elementwise.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/dnnl_context.h"
#include "runtime/error.h"

namespace bertlab::ops {

using dnnl::memory;

void activation_forward_reference(float* y, const float* x, int64_t n, Activation act) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    if (act == Activation::gelu) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    if (act == Activation::tanh) v = std::tanh(v);
    y[i] = static_cast<float>(v);
  }
}

ActivationOp::ActivationOp(int64_t n, Activation act) {
  check(act != Activation::none, "activation op needs gelu or tanh");
  auto& ctx = dnnl_context();
  auto alg = act == Activation::gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_tanh;
  memory::desc data({n}, memory::data_type::f32, memory::format_tag::a);
  pd_ = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, alg, data, 0.f, 0.f),
      ctx.engine);
  prim_ = dnnl::eltwise_forward(pd_);
}

void ActivationOp::forward(float* y, const float* x) const {
  auto& ctx = dnnl_context();
  prim_.execute(ctx.stream,
                {{DNNL_ARG_SRC, wrap(pd_.src_desc(), x)}, {DNNL_ARG_DST, wrap(pd_.dst_desc(), y)}});
  ctx.stream.wait();
}

void add_forward(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void add_forward_reference(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mask_bias_forward(float* bias, const int32_t* mask, int64_t n) {
  const float drop = std::numeric_limits<float>::lowest();
  for (int64_t i = 0; i < n; ++i) bias[i] = mask[i] != 0 ? 0.f : drop;
}

void first_token_forward(float* y, const float* x, int64_t B, int64_t S, int64_t H) {
  for (int64_t b = 0; b < B; ++b) std::memcpy(y + b * H, x + b * S * H, H * sizeof(float));
}

}  // namespace bertlab::ops

#include "ops/matmul.h"

#include <cmath>
#include <vector>

#include "ops/dnnl_context.h"
#include "runtime/error.h"

namespace bertlab::ops {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

Activation activation_from_string(const std::string& s) {
  if (s == "none") return Activation::none;
  if (s == "gelu") return Activation::gelu;
  if (s == "tanh") return Activation::tanh;
  fail("unknown activation '{}' (expected none, gelu or tanh)", s);
}

namespace {

float apply_activation(float v, Activation act) {
  switch (act) {
    case Activation::gelu:
      return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case Activation::tanh:
      return std::tanh(v);
    case Activation::none:
      break;
  }
  return v;
}

std::string impl_of(const dnnl::primitive_desc_base& pd) { return pd.impl_info_str(); }

}  // namespace

void linear_forward_reference(float* y, const float* x, const float* w, const float* b,
                              const float* residual, int64_t M, int64_t N, int64_t K,
                              Activation act) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = b ? b[j] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[i * K + k]) * w[j * K + k];
      float v = apply_activation(static_cast<float>(acc), act);
      y[i * N + j] = residual ? v + residual[i * N + j] : v;
    }
}

Linear::Linear(int64_t M, int64_t N, int64_t K, Activation act, bool residual)
    : M_(M), N_(N), K_(K), residual_(residual) {
  auto& ctx = dnnl_context();
  memory::desc src({M, K}, dt::f32, tag::ab);
  memory::desc wei_any({K, N}, dt::f32, tag::any);
  memory::desc bias({1, N}, dt::f32, tag::ab);
  memory::desc dst({M, N}, dt::f32, tag::ab);
  dnnl::post_ops po;
  if (act == Activation::gelu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  if (act == Activation::tanh) po.append_eltwise(1.f, dnnl::algorithm::eltwise_tanh, 0.f, 0.f);
  if (residual) po.append_binary(dnnl::algorithm::binary_add, dst);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei_any, bias, dst), attr, ctx.engine);
  prim_ = dnnl::matmul(pd_);
  // HF weights are (N,K) row-major, i.e. the (K,N) matrix in column-major order: tag "ba".
  memory::desc plain_w({K, N}, dt::f32, tag::ba);
  pack_pd_ = dnnl::reorder::primitive_desc(ctx.engine, plain_w, ctx.engine, pd_.weights_desc());
  packed_ = memory(pd_.weights_desc(), ctx.engine);
}

void Linear::pack_weights(const float* w) {
  auto& ctx = dnnl_context();
  auto src = wrap(pack_pd_.src_desc(), w);
  dnnl::reorder(pack_pd_).execute(ctx.stream, src, packed_);
  ctx.stream.wait();
}

void Linear::forward(float* y, const float* x, const float* b, const float* residual) const {
  auto& ctx = dnnl_context();
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(pd_.src_desc(), x)},
                                       {DNNL_ARG_WEIGHTS, packed_},
                                       {DNNL_ARG_BIAS, wrap(pd_.bias_desc(), b)},
                                       {DNNL_ARG_DST, wrap(pd_.dst_desc(), y)}};
  if (residual_) {
    check(residual != nullptr, "linear built with a residual input was called without one");
    int po_index = pd_.get_primitive_attr().get_post_ops().len() - 1;
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(po_index) | DNNL_ARG_SRC_1,
                 wrap(pd_.dst_desc(), residual));
  }
  prim_.execute(ctx.stream, args);
  ctx.stream.wait();
}

std::string Linear::impl_name() const { return impl_of(pd_); }

void attn_scores_reference(float* scores, const float* qkv, const float* mask_bias, int64_t B,
                           int64_t S, int64_t heads, int64_t d, float scale) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) {
          const float* q = qkv + (b * S + i) * row + h * d;
          const float* k = qkv + (b * S + j) * row + H + h * d;
          double acc = 0;
          for (int64_t c = 0; c < d; ++c) acc += double(q[c]) * k[c];
          scores[((b * heads + h) * S + i) * S + j] =
              static_cast<float>(acc * scale) + mask_bias[b * S + j];
        }
}

void attn_context_reference(float* ctx, const float* probs, const float* qkv, int64_t B,
                            int64_t S, int64_t heads, int64_t d) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j)
            acc += double(probs[((b * heads + h) * S + i) * S + j]) *
                   qkv[(b * S + j) * row + 2 * H + h * d + c];
          ctx[(b * S + i) * H + h * d + c] = static_cast<float>(acc);
        }
}

// Q, K and V are strided views of qkv (B,S,3,heads,d): no copies, the matmul reads in place.
AttentionScores::AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale) {
  auto& ctx = dnnl_context();
  const int64_t H = heads * d, row = 3 * H;
  memory::desc q({B, heads, S, d}, dt::f32, memory::dims{S * row, d, row, 1});
  memory::desc kt({B, heads, d, S}, dt::f32, memory::dims{S * row, d, 1, row});
  memory::desc dst({B, heads, S, S}, dt::f32, tag::abcd);
  memory::desc bias({B, 1, 1, S}, dt::f32, tag::abcd);
  dnnl::primitive_attr attr;
  attr.set_output_scales(0, {scale});
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_add, bias);
  attr.set_post_ops(po);
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(q, kt, dst), attr, ctx.engine);
  prim_ = dnnl::matmul(pd_);
}

void AttentionScores::forward(float* scores, const float* qkv, const float* mask_bias) const {
  auto& ctx = dnnl_context();
  const auto& src_md = pd_.src_desc();
  const float* k = qkv + src_md.dims()[1] * src_md.dims()[3];  // skip the H columns of Q
  prim_.execute(ctx.stream,
                {{DNNL_ARG_SRC, wrap(src_md, qkv)},
                 {DNNL_ARG_WEIGHTS, wrap(pd_.weights_desc(), k)},
                 {DNNL_ARG_DST, wrap(pd_.dst_desc(), scores)},
                 {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                  wrap(pd_.query_md(dnnl::query::exec_arg_md,
                                    DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1),
                       mask_bias)}});
  ctx.stream.wait();
}

std::string AttentionScores::impl_name() const { return impl_of(pd_); }

AttentionContext::AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d) {
  auto& ctx = dnnl_context();
  const int64_t H = heads * d, row = 3 * H;
  memory::desc p({B, heads, S, S}, dt::f32, tag::abcd);
  memory::desc v({B, heads, S, d}, dt::f32, memory::dims{S * row, d, row, 1});
  memory::desc dst({B, heads, S, d}, dt::f32, memory::dims{S * H, d, H, 1});
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p, v, dst), ctx.engine);
  prim_ = dnnl::matmul(pd_);
}

void AttentionContext::forward(float* out, const float* probs, const float* qkv) const {
  auto& ctx = dnnl_context();
  const auto& v_md = pd_.weights_desc();
  const float* v = qkv + 2 * v_md.dims()[1] * v_md.dims()[3];  // skip Q and K
  prim_.execute(ctx.stream, {{DNNL_ARG_SRC, wrap(pd_.src_desc(), probs)},
                             {DNNL_ARG_WEIGHTS, wrap(v_md, v)},
                             {DNNL_ARG_DST, wrap(pd_.dst_desc(), out)}});
  ctx.stream.wait();
}

std::string AttentionContext::impl_name() const { return impl_of(pd_); }

}  // namespace bertlab::ops

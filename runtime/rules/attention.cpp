// The rules of the attention products on the fused (B, S, 3H) qkv tensor (kernels in
// ops/matmul.h): scores = Q K^T * scale + bias, context = P V, and their four gradients.
#include "ops/matmul.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::attention {

namespace {

using AttnKind = ops::AttentionGrad::Kind;


// Per batch and head, products giving scores are S x S x d; those giving Q, K or V are S x d x S.
GemmShape to_scores(const Node& n, const Shape& qkv, bool ta, bool tb, GemmRole role) {
  int64_t heads = int_attr(n, "heads");
  return GemmShape{qkv[0] * heads, qkv[1], qkv[1], qkv[2] / 3 / heads, ta, tb, role};
}
GemmShape to_heads(const Node& n, const Shape& qkv, bool ta, bool tb, GemmRole role) {
  int64_t heads = int_attr(n, "heads");
  return GemmShape{qkv[0] * heads, qkv[1], qkv[2] / 3 / heads, qkv[1], ta, tb, role};
}
std::pair<int64_t, int64_t> heads_and_d(const Node& n, const Shape& qkv) {
  int64_t heads = n.attrs.at("heads");
  return std::pair{heads, qkv[2] / 3 / heads};
}
// The (B,S,3H) shape of qkv from dctx (B,S,H).
Shape qkv_of_context(const Shape& dctx) { return Shape{dctx[0], dctx[1], 3 * dctx[2]}; }

// attn_scores: qkv(B,S,3H), bias(B,S) -> scores(B,nh,S,S) = Q K^T * scale + bias; attrs heads, scale
OutputTypes scores_outputs(const Graph& g, const Node& n) {
  const auto& qkv = in_shape(g, n, 0);
  head_size(n, qkv);
  check(in_shape(g, n, 1) == Shape{qkv[0], qkv[1]}, "node '{}': mask bias {} is not [B, S]", n.name,
        shape_str(in_shape(g, n, 1)));
  return f32({{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}});
}
GemmShape scores_gemm(const Graph& g, const Node& n) {  // Q K^T
  return to_scores(n, in_shape(g, n, 0), false, true, GemmRole::scores);
}
double scores_flops(const Graph& g, const Node& n) {
  return scores_gemm(g, n).flops() + 2 * out0_numel(g, n);  // scale and mask bias
}
int64_t scores_bytes(const Graph& g, const Node& n) {  // Q and K thirds of qkv
  return in_bytes(g, n, 0) * 2 / 3 + in_bytes(g, n, 1) + out_bytes(g, n, 0);
}
void scores_backward(Differentiator& d, const Node& n, int dy) {
  const auto& in = n.inputs;
  const int dqkv = d.held_dqkv(in[0]);
  check(dqkv >= 0, "node '{}': its qkv feeds no attn_context", n.name);
  d.emit(OpKind::attn_scores_grad_q, n.name + ".grad_q", {dy, d.saved(in[0])}, {dqkv}, n.attrs);
  d.emit(OpKind::attn_scores_grad_k, n.name + ".grad_k", {dy, d.saved(in[0])}, {dqkv}, n.attrs);
  d.contribute(in[0], dqkv);
}
std::function<void()> scores_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto q = b.shape(n, 0);
  auto [heads, d] = heads_and_d(n, q);
  auto op = std::make_shared<ops::AttentionScores>(q[0], q[1], heads, d, n.attrs.at("scale").get<float>(),
                                                   gemm_bf16(n), b.handed_off(n.inputs[0]));
  const float *qkv = b.in(n, 0), *bias = b.in(n, 1);
  return [=] { op->forward(out, qkv, bias); };
}

// attn_context: probs(B,nh,S,S), qkv(B,S,3H) -> ctx(B,S,H) = P V, heads concatenated; attr heads
OutputTypes context_outputs(const Graph& g, const Node& n) {
  const auto& p = in_shape(g, n, 0);
  const auto& qkv = in_shape(g, n, 1);
  expect_rank(n, p, 4, "probs");
  head_size(n, qkv);
  check(p == Shape{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}, "node '{}': probs {} do not match qkv {}",
        n.name, shape_str(p), shape_str(qkv));
  return f32({{qkv[0], qkv[1], qkv[2] / 3}});
}
GemmShape context_gemm(const Graph& g, const Node& n) {  // P V
  return to_heads(n, in_shape(g, n, 1), false, false, GemmRole::context);
}
double context_flops(const Graph& g, const Node& n) { return context_gemm(g, n).flops(); }
int64_t context_bytes(const Graph& g, const Node& n) {  // V third of qkv
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) / 3 + out_bytes(g, n, 0);
}
void context_backward(Differentiator& d, const Node& n, int dy) {
  // The V third of dqkv now; attn_scores' backward fills the Q and K thirds.
  const auto& in = n.inputs;
  int dprobs = d.emit1(OpKind::attn_context_grad_probs, n.name + ".grad_probs", {dy, d.saved(in[1])}, n.attrs);
  d.hold_dqkv(in[1], d.emit1(OpKind::attn_context_grad_v, n.name + ".grad_v", {dy, d.saved(in[0])}, n.attrs));
  d.contribute(in[0], dprobs);
}
std::function<void()> context_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto q = b.shape(n, 1);
  auto [heads, d] = heads_and_d(n, q);
  auto op = std::make_shared<ops::AttentionContext>(q[0], q[1], heads, d, gemm_bf16(n), b.handed_off(n.outputs[0]),
                                                    b.handed_off(n.inputs[1]), b.handed_off(n.inputs[0]));
  const float *p = b.in(n, 0), *qkv = b.in(n, 1);
  return [=] { op->forward(out, p, qkv); };
}

// The four gradients: one kernel (ops::AttentionGrad) of four kinds.
std::function<void()> grad_kernel(StepBinder& b, const Node& n, AttnKind kind) {
  float* out = b.out(n, 0);
  Shape qkv = kind == AttnKind::context_v ? qkv_of_context(b.shape(n, 0)) : b.shape(n, 1);
  auto [heads, d] = heads_and_d(n, qkv);
  float scale = n.attrs.value("scale", 1.0f);
  const bool probs_bf16 = kind == AttnKind::context_v && b.handed_off(n.inputs[1]);
  auto op = std::make_shared<ops::AttentionGrad>(kind, qkv[0], qkv[1], heads, d, scale, gemm_bf16(n),
                                                 b.shared_attention(n), probs_bf16);
  const float *x = b.in(n, 0), *y = b.in(n, 1);
  return [=] { op->forward(out, x, y); };
}

// attn_scores_grad_q / _k: dscores(B,nh,S,S), qkv -> dqkv(B,S,3H), its Q third = dS K * scale
// (its K third = dS^T Q * scale)
OutputTypes scores_grad_outputs(const Graph& g, const Node& n) {
  const auto& ds = in_shape(g, n, 0);
  const auto& qkv = in_shape(g, n, 1);
  head_size(n, qkv);
  check(ds == Shape{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}, "node '{}': score gradient {} does not match qkv {}",
        n.name, shape_str(ds), shape_str(qkv));
  return f32({qkv});
}
GemmShape scores_grad_q_gemm(const Graph& g, const Node& n) {  // dS K
  return to_heads(n, in_shape(g, n, 1), false, false, GemmRole::scores_grad_q);
}
GemmShape scores_grad_k_gemm(const Graph& g, const Node& n) {  // dS^T Q
  return to_heads(n, in_shape(g, n, 1), true, false, GemmRole::scores_grad_k);
}
double scores_grad_flops(const Graph& g, const Node& n) {  // GEMM and the scale
  const GemmShape gm = op_rules(n.kind).gemm(g, n);
  return gm.flops() + gm.flops() / (2.0 * gm.k);
}
int64_t scores_grad_bytes(const Graph& g, const Node& n) {  // dS, K (or Q), one third of dqkv written
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) / 3 + out_bytes(g, n, 0) / 3;
}
std::function<void()> scores_grad_q_kernel(StepBinder& b, const Node& n) { return grad_kernel(b, n, AttnKind::scores_q); }
std::function<void()> scores_grad_k_kernel(StepBinder& b, const Node& n) { return grad_kernel(b, n, AttnKind::scores_k); }

// attn_context_grad_probs: dctx(B,S,H), qkv -> dprobs(B,nh,S,S) = dctx V^T
OutputTypes context_grad_probs_outputs(const Graph& g, const Node& n) {
  const auto& dctx = in_shape(g, n, 0);
  const auto& qkv = in_shape(g, n, 1);
  head_size(n, qkv);
  check(dctx == Shape{qkv[0], qkv[1], qkv[2] / 3}, "node '{}': context gradient {} does not match qkv {}", n.name,
        shape_str(dctx), shape_str(qkv));
  return f32({{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}});
}
GemmShape context_grad_probs_gemm(const Graph& g, const Node& n) {  // dctx V^T
  return to_scores(n, in_shape(g, n, 1), false, true, GemmRole::context_grad_probs);
}
double context_grad_probs_flops(const Graph& g, const Node& n) { return context_grad_probs_gemm(g, n).flops(); }
int64_t context_grad_probs_bytes(const Graph& g, const Node& n) {  // dctx, V, dprobs
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) / 3 + out_bytes(g, n, 0);
}
std::function<void()> context_grad_probs_kernel(StepBinder& b, const Node& n) {
  return grad_kernel(b, n, AttnKind::context_probs);
}

// attn_context_grad_v: dctx(B,S,H), probs -> dqkv(B,S,3H), its V third = P^T dctx
OutputTypes context_grad_v_outputs(const Graph& g, const Node& n) {
  const auto& dctx = in_shape(g, n, 0);
  const auto& p = in_shape(g, n, 1);
  expect_rank(n, dctx, 3, "context gradient");
  check(p == Shape{dctx[0], int_attr(n, "heads"), dctx[1], dctx[1]},
        "node '{}': probs {} do not match context gradient {}", n.name, shape_str(p), shape_str(dctx));
  return f32({qkv_of_context(dctx)});
}
GemmShape context_grad_v_gemm(const Graph& g, const Node& n) {  // P^T dctx
  return to_heads(n, qkv_of_context(in_shape(g, n, 0)), true, false, GemmRole::context_grad_v);
}
double context_grad_v_flops(const Graph& g, const Node& n) { return context_grad_v_gemm(g, n).flops(); }
int64_t context_grad_v_bytes(const Graph& g, const Node& n) {  // dctx, probs, V third of dqkv
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) + out_bytes(g, n, 0) / 3;
}
std::function<void()> context_grad_v_kernel(StepBinder& b, const Node& n) {
  return grad_kernel(b, n, AttnKind::context_v);
}

}  // namespace

const OpRules attn_scores{scores_outputs, scores_flops, scores_bytes, scores_gemm, scores_backward, scores_kernel};
const OpRules attn_context{context_outputs, context_flops, context_bytes, context_gemm, context_backward,
                           context_kernel};
const OpRules attn_scores_grad_q{scores_grad_outputs, scores_grad_flops, scores_grad_bytes, scores_grad_q_gemm, nullptr,
                                 scores_grad_q_kernel};
const OpRules attn_scores_grad_k{scores_grad_outputs, scores_grad_flops, scores_grad_bytes, scores_grad_k_gemm, nullptr,
                                 scores_grad_k_kernel};
const OpRules attn_context_grad_probs{context_grad_probs_outputs, context_grad_probs_flops, context_grad_probs_bytes,
                                      context_grad_probs_gemm, nullptr, context_grad_probs_kernel};
const OpRules attn_context_grad_v{context_grad_v_outputs, context_grad_v_flops, context_grad_v_bytes,
                                  context_grad_v_gemm, nullptr, context_grad_v_kernel};

}  // namespace bertlab::rules::attention

// Executor::make_step: the node's kernel, bound once to its buffers by its kind's rules
// (runtime/rules/); and the steps that run several nodes as one pass (runtime::fused_steps).
#include <algorithm>
#include <cmath>
#include <omp.h>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/optimizer.h"
#include "runtime/executor.h"
#include "runtime/op_rules.h"
#include "runtime/step_binder.h"

namespace bertlab {

ops::AdamHyper optimizer_hyper(const StepContext& ctx) {
  ops::AdamHyper h{ctx.lr, ctx.beta1, ctx.beta2, ctx.eps, ctx.weight_decay, ctx.step, 1.f};
  if (ctx.max_grad_norm > 0) {
    const double coef = ctx.max_grad_norm / (ctx.grad_norm + 1e-6);
    if (coef < 1) h.grad_scale = static_cast<float>(coef);
  }
  return h;
}

std::function<void()> Executor::make_step(const Node& n) {
  // A recomputation whose only reader, a bf16 dW GEMM, takes the forward's kept copy instead
  // (kept_x_casts): nothing to run.
  if (kept_x_.at(static_cast<size_t>(n.id)).role == KeptX::skipped) return [] {};
  StepBinder binder(*this);
  return op_rules(n.kind).kernel(binder, n);
}

void Executor::fuse_optimizer_steps() {
  // Each run of consecutive adamw_update (or lamb_update) nodes becomes one step: one parallel
  // pass over all their tensors for AdamW, two for LAMB (its trust ratio needs each tensor's
  // norms first), bit-identical to the per-node kernels. The first node of the run carries the
  // step (and its time in a profile); the others become empty.
  const auto& nodes = graph_.nodes();
  const std::vector<int64_t> runs = optimizer_runs(graph_);
  for (size_t first = 0; first < nodes.size(); ++first) {
    const OpKind kind = nodes[first].kind;
    if ((kind != OpKind::adamw_update && kind != OpKind::lamb_update) || runs[first] == 0) continue;
    const size_t last = first + static_cast<size_t>(runs[first]);
    std::vector<ops::AdamSegment> segments;
    for (size_t i = first; i < last; ++i) {
      const Node& n = nodes[i];
      float *p = f32(n.inputs[0]), *g = f32(n.inputs[1]), *m = f32(n.inputs[2]), *v = f32(n.inputs[3]);
      const int64_t count = graph_.tensor(n.inputs[0]).numel();
      const bool decay = n.attrs.at("decay").get<bool>();
      // LAMB: a stacked query/key/value has one trust ratio per part, as separate tensors would.
      const int64_t parts = kind == OpKind::lamb_update ? n.attrs.value("segments", 1) : 1;
      const int64_t part = count / parts;
      for (int64_t s = 0; s < parts; ++s)
        segments.push_back({p + s * part, m + s * part, v + s * part, g + s * part, part, decay});
    }
    StepContext* ctx = &context_;
    const bool adamw = kind == OpKind::adamw_update;
    steps_[first] = [ctx, adamw, segments = std::move(segments)] {
      if (!std::isfinite(ctx->grad_norm)) return;  // diverged: leave the parameters as they are
      const ops::AdamHyper h = optimizer_hyper(*ctx);
      if (adamw)
        ops::adamw_update_fused(segments, h);
      else
        ops::lamb_update_fused(segments, h);
    };
    for (size_t i = first + 1; i < last; ++i) steps_[i] = [] {};
  }
}

void Executor::fuse_pairs() {
  const auto& nodes = graph_.nodes();
  for (size_t i = 0; i < runs_.size(); ++i) {
    if (runs_[i] != kFusedPair) continue;
    const Node &a = nodes[i], &b = nodes[i + 1];
    auto step = a.kind == OpKind::dropout ? dropout_add_step(a, b) : dropout_softmax_grad_step(a, b);
    if (!step) continue;  // buffers that overlap other than element for element: two kernels
    steps_[i] = std::move(step);
    steps_[i + 1] = [] {};
  }
}

std::function<void()> Executor::attention_step(const Node& scores, const Node& context) {
  // ctx = context(softmax(scores(qkv, bias))), block by block of heads (ops::FusedAttention),
  // on the threads this executor's other kernels run on. The scores and probabilities stay in
  // the kernel's scratch (they have no buffer, plan_memory).
  const Shape q = graph_.tensor(scores.inputs.at(0)).shape;
  const int64_t heads = scores.attrs.at("heads");
  auto handed = [&](int t) { return handoff_.at(static_cast<size_t>(t)) != 0; };
  auto op = std::make_shared<ops::FusedAttention>(q[0], q[1], heads, q[2] / 3 / heads,
                                                  scores.attrs.at("scale").get<float>(), gemm_bf16(scores),
                                                  handed(scores.inputs.at(0)), handed(context.outputs.at(0)),
                                                  omp_get_max_threads());
  const float *qkv = f32(scores.inputs.at(0)), *bias = f32(scores.inputs.at(1));
  float* ctx = f32(context.outputs.at(0));
  return [=] { op->forward(ctx, qkv, bias); };
}

std::function<void()> Executor::dropout_add_step(const Node& drop, const Node& add) {
  // y = dropout(x) + r in one pass (ops::dropout_add_forward). It reads each element before
  // writing it, so y may share memory with x or r, but only element for element.
  const int d = drop.outputs.at(0), x = drop.inputs.at(0), y = add.outputs.at(0);
  const int r = add.inputs.at(0) == d ? add.inputs.at(1) : add.inputs.at(0);
  auto overlaps_shifted = [&](int a, int b) {
    const auto *pa = static_cast<const std::byte*>(buffer(a)), *pb = static_cast<const std::byte*>(buffer(b));
    const auto na = graph_.tensor(a).bytes(), nb = graph_.tensor(b).bytes();
    return pa != pb && pa < pb + nb && pb < pa + na;
  };
  if (overlaps_shifted(y, x) || overlaps_shifted(y, r)) return {};
  const float *xp = f32(x), *rp = f32(r);
  float* yp = f32(y);
  const int64_t count = graph_.tensor(y).numel();
  const float p = drop.attrs.at("p").get<float>();
  const uint64_t salt = drop.attrs.at("salt").get<uint64_t>();
  StepContext* ctx = &context_;
  return [=] {
    ops::dropout_add_forward(yp, xp, rp, count, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)});
  };
}

std::function<void()> Executor::dropout_softmax_grad_step(const Node& drop, const Node& soft) {
  // dx = softmax_backward(dropout(dy), y) row by row (ops::dropout_softmax_backward). It reads
  // each row before writing it, so dx may share memory with either input (in place, or the
  // dropout_grad input dying there).
  const Shape s = graph_.tensor(soft.inputs.at(1)).shape;
  const float *dy = f32(drop.inputs.at(0)), *y = f32(soft.inputs.at(1));
  float* dx = f32(soft.outputs.at(0));
  const int64_t L = s.back(), rows = numel(s) / L;
  const float p = drop.attrs.at("p").get<float>();
  const uint64_t salt = drop.attrs.at("salt").get<uint64_t>();
  StepContext* ctx = &context_;
  return [=] {
    ops::dropout_softmax_backward(dx, dy, y, rows, L, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)});
  };
}

}  // namespace bertlab

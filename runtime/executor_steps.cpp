// The kernel of every op kind, bound once to its buffers: Executor::make_step.
#include <algorithm>
#include <cmath>
#include <omp.h>

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/optimizer.h"
#include "runtime/autodiff.h"
#include "runtime/bert_config.h"
#include "runtime/distributed.h"
#include "base/error.h"
#include "runtime/executor.h"
#include "runtime/fusion.h"
#include "runtime/grad_sync.h"
#include "runtime/kernel_seam.h"
#include "runtime/op_rules.h"

namespace bertlab {

namespace {
// A weight as one GEMM reads it (packed, or cast to bf16), kept across the micro-batches of an
// optimizer step: remade when StepContext::weights_version moves, allocated on first use (the
// executor's kept_weight_bytes() counts it then).
class KeptWeight {
 public:
  KeptWeight(int64_t bytes, int64_t* total_bytes) : bytes_(bytes), total_bytes_(total_bytes) {}
  template <class Make>
  const void* get(uint64_t version, const Make& make) {
    if (copy_.size() == 0) {
      copy_ = AlignedBuffer<std::byte>(static_cast<size_t>(bytes_));
      *total_bytes_ += bytes_;
    }
    if (version != version_) {
      make(copy_.data());
      version_ = version;
    }
    return copy_.data();
  }

 private:
  int64_t bytes_;
  int64_t* total_bytes_;
  uint64_t version_ = 0;  // 0: never made (weights_version 0 never reaches get())
  AlignedBuffer<std::byte> copy_;
};
}  // namespace

std::function<void()> Executor::make_linear_step(const Node& n) {
  auto gm = *node_gemm(graph_, n);
  const bool residual = n.inputs.size() > 3;
  const auto act = activation_of(n);
  // Training packs each weight before its GEMM into one scratch buffer, except a large one
  // (gemm_b_packed).
  const bool pack = !training() || gemm_b_packed(graph_, n);
  const ops::LinearBf16Io io{handoff_.at(static_cast<size_t>(n.inputs[0])) != 0,
                             handoff_.at(static_cast<size_t>(n.outputs[0])) != 0};
  auto lin = std::make_shared<ops::Linear>(gm.m, gm.n, gm.k, act, residual, pack, gemm_bf16(n), io);
  float *y = f32(n.outputs[0]), *x = f32(n.inputs[0]), *w = f32(n.inputs[1]), *b = f32(n.inputs[2]);
  float* r = residual ? f32(n.inputs[3]) : nullptr;
  if (!training()) {
    packed_weight_bytes_ += lin->packed_bytes();
    repackers_.push_back([lin, w] { lin->pack_weights(w); });
    return [=] { lin->forward(y, x, b, r); };
  }
  if (kept_x_.at(static_cast<size_t>(n.id)).role == KeptX::keeps) {  // bf16 x kept for the layer's dW GEMM
    auto& copy = kept_x_copies_[n.id];
    copy = AlignedBuffer<std::byte>(lin->x_copy_bytes());
    lin->keep_x_in(copy.data());
  }
  if (lin->weights_in_place()) return [=] { lin->forward_packed(w, y, x, b, r); };
  // Weights change every step: each call packs them just before the GEMM into the calling
  // thread's scratch (the large unpacked weight in bf16: casts them in forward_packed), or, with
  // a weights version, once per optimizer step into this GEMM's own copy.
  if (pack) packed_weight_bytes_ = std::max(packed_weight_bytes_, lin->packed_bytes());
  auto kept = std::make_shared<KeptWeight>(lin->packed_bytes(), &kept_weight_bytes_);
  const StepContext* ctx = &context_;
  return [=] {
    if (ctx->weights_version) {
      const void* copy = kept->get(ctx->weights_version, [&](void* dst) { lin->pack_weights_into(w, dst); });
      return lin->forward_prepared(copy, y, x, b, r);
    }
    if (!pack) return lin->forward_packed(w, y, x, b, r);
    lin->forward_repacking(w, y, x, b, r);
  };
}

namespace {
// The step's optimizer hyper-parameters, with global-norm clipping as
// torch.nn.utils.clip_grad_norm_ (the gradient scaled by max_norm / (norm + 1e-6) when below 1).
ops::AdamHyper optimizer_hyper(const StepContext& ctx) {
  ops::AdamHyper h{ctx.lr, ctx.beta1, ctx.beta2, ctx.eps, ctx.weight_decay, ctx.step, 1.f};
  if (ctx.max_grad_norm > 0) {
    const double coef = ctx.max_grad_norm / (ctx.grad_norm + 1e-6);
    if (coef < 1) h.grad_scale = static_cast<float>(coef);
  }
  return h;
}
}  // namespace

std::function<void()> Executor::make_step(const Node& n) {
  // A recomputation whose only reader, a bf16 dW GEMM, takes the forward's kept copy instead
  // (kept_x_casts): nothing to run.
  if (kept_x_.at(static_cast<size_t>(n.id)).role == KeptX::skipped) return [] {};
  float* out = out_of(n, 0);
  const int64_t out_numel = graph_.tensor(n.outputs.at(0)).numel();
  StepContext* ctx = &context_;

  switch (n.kind) {
    case OpKind::embedding: {
      auto s = shape_of(n, 0);
      int64_t H = shape_of(n, 2)[1];
      const int32_t *ids = i32(n.inputs[0]), *types = i32(n.inputs[1]);
      const float *word = in_of(n, 2), *pos = in_of(n, 3), *type = in_of(n, 4);
      return [=] { ops::embedding_forward(out, ids, types, word, pos, type, s[0], s[1], H); };
    }
    case OpKind::mask_bias: {
      const int32_t* mask = i32(n.inputs[0]);
      return [=] { ops::mask_bias_forward(out, mask, out_numel); };
    }
    case OpKind::linear:
      return make_linear_step(n);
    case OpKind::softmax: {
      auto s = shape_of(n, 0);
      auto op = std::make_shared<ops::Softmax>(numel(s) / s.back(), s.back());
      const float* x = in_of(n, 0);
      return [=] { op->forward(out, x); };
    }
    case OpKind::add: {
      const float *a = in_of(n, 0), *b = in_of(n, 1);
      return [=] { ops::add_forward(out, a, b, out_numel); };
    }
    case OpKind::scale: {
      const float* x = in_of(n, 0);
      const float alpha = n.attrs.at("alpha").get<float>();
      return [=] { ops::scale_forward(out, x, alpha, out_numel); };
    }
    case OpKind::layernorm: {
      auto s = shape_of(n, 0);
      const int64_t rows = numel(s) / s.back(), H = s.back();
      const float eps = n.attrs.at("eps").get<float>();
      const float *x = in_of(n, 0), *gamma = in_of(n, 1), *beta = in_of(n, 2);
      if (auto lab = kernel_seam().layernorm) return [=] { lab(out, x, gamma, beta, rows, H, eps); };
      auto op = std::make_shared<ops::LayerNorm>(rows, H, eps);
      return [=] { op->forward(out, x, gamma, beta); };
    }
    case OpKind::activation: {
      auto op = std::make_shared<ops::ActivationOp>(out_numel, activation_of(n));
      const float* x = in_of(n, 0);
      return [=] { op->forward(out, x); };
    }
    case OpKind::first_token: {
      auto s = shape_of(n, 0);
      const float* x = in_of(n, 0);
      return [=] { ops::first_token_forward(out, x, s[0], s[1], s[2]); };
    }
    case OpKind::dropout:
    case OpKind::dropout_grad: {
      const float* x = in_of(n, 0);
      const float p = n.attrs.at("p").get<float>();
      const uint64_t salt = n.attrs.at("salt").get<uint64_t>();
      if (n.kind == OpKind::dropout && handoff_.at(static_cast<size_t>(n.outputs[0]))) {  // bf16 probabilities
        auto* out16 = reinterpret_cast<uint16_t*>(out);
        return [=] {
          ops::dropout_forward_bf16(out16, x, out_numel, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)});
        };
      }
      return [=] { ops::dropout_forward(out, x, out_numel, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)}); };
    }
    case OpKind::gather_rows: {
      auto s = shape_of(n, 0), pos = shape_of(n, 1);
      const float* x = in_of(n, 0);
      const int32_t* positions = i32(n.inputs[1]);
      return [=] { ops::gather_rows_forward(out, x, positions, s[0], s[1], pos[1], s[2]); };
    }
    case OpKind::cross_entropy: {
      auto s = shape_of(n, 0);
      const float* logits = in_of(n, 0);
      const int32_t* labels = i32(n.inputs[1]);
      return [=] {
        auto st = ops::cross_entropy_forward(logits, labels, s[0], s[1]);
        out[0] = static_cast<float>(st.loss_sum), out[1] = static_cast<float>(st.correct),
        out[2] = static_cast<float>(st.count);
      };
    }
    case OpKind::cross_entropy_grad:
    case OpKind::softmax_grad:
    case OpKind::layernorm_grad:
    case OpKind::activation_grad:
    case OpKind::embedding_grad:
    case OpKind::gather_rows_grad:
    case OpKind::first_token_grad:
      return make_grad_step(n);
    case OpKind::linear_grad_input:
    case OpKind::linear_grad_weight:
      return make_linear_grad_step(n);
    case OpKind::attn_scores:
    case OpKind::attn_context:
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k:
    case OpKind::attn_context_grad_probs:
    case OpKind::attn_context_grad_v:
      return make_attention_step(n);
    case OpKind::allreduce:
    case OpKind::grad_norm:
    case OpKind::adamw_update:
    case OpKind::lamb_update:
      return make_update_step(n);
  }
  fail("node '{}': op kind {} has no kernel", n.name, to_string(n.kind));
}

// The gradients of the ops that are not GEMMs: the losses', softmax's, LayerNorm's, the
// activations', the embeddings' (rows deferred to the gradient sync under data parallelism),
// and the row gathers'.
std::function<void()> Executor::make_grad_step(const Node& n) {
  float* out = out_of(n, 0);
  const int64_t out_numel = graph_.tensor(n.outputs.at(0)).numel();
  StepContext* ctx = &context_;
  switch (n.kind) {
    case OpKind::cross_entropy_grad: {
      auto s = shape_of(n, 0);
      const float* logits = in_of(n, 0);
      const int32_t* labels = i32(n.inputs[1]);
      const bool mlm = n.attrs.at("loss") == "mlm";
      return [=] {
        ops::cross_entropy_backward(out, logits, labels, s[0], s[1],
                                    mlm ? ctx->mlm_denominator : ctx->nsp_denominator);
      };
    }
    case OpKind::softmax_grad: {
      auto s = shape_of(n, 0);
      const float *dy = in_of(n, 0), *y = in_of(n, 1);
      return [=] { ops::softmax_backward(out, dy, y, numel(s) / s.back(), s.back()); };
    }
    case OpKind::layernorm_grad: {
      auto s = shape_of(n, 1);
      const float *dy = in_of(n, 0), *x = in_of(n, 1), *gamma = in_of(n, 2);
      float *dgamma = out_of(n, 1), *dbeta = out_of(n, 2);
      const float eps = n.attrs.at("eps").get<float>();
      if (auto lab = kernel_seam().layernorm_grad)
        return [=] { lab(out, dgamma, dbeta, dy, x, gamma, numel(s) / s.back(), s.back(), eps); };
      auto scratch = std::make_shared<std::vector<float>>();
      return [=] {
        ops::layernorm_backward(out, dgamma, dbeta, dy, x, gamma, numel(s) / s.back(), s.back(), eps,
                                *scratch);
      };
    }
    case OpKind::activation_grad: {
      auto op = std::make_shared<ops::ActivationGrad>(out_numel, activation_of(n));
      const float *dy = in_of(n, 0), *v = in_of(n, 1);
      return [=] { op->forward(out, dy, v); };
    }
    case OpKind::embedding_grad: {
      auto s = shape_of(n, 0);
      const float* dy = in_of(n, 0);
      const int32_t *ids = i32(n.inputs[1]), *types = i32(n.inputs[2]);
      float *dpos = out_of(n, 1), *dtype = out_of(n, 2);
      // Data parallel with overlap: the word rows go to the gradient sync's compact table while
      // the table's bucket is in flight (runtime/grad_sync.h); made by the allreduce node, later.
      const std::unique_ptr<GradientSync>* sync = &sync_;
      const int64_t node = n.id;
      return [=] {
        GradientSync* gs = sync->get();
        if (gs && gs->defers_rows(node)) {
          const auto rows = gs->rows_for(node, ids, s[0] * s[1]);
          ops::embedding_backward(rows.table, dpos, dtype, dy, rows.ids, types, s[0], s[1], s[2]);
          return;
        }
        ops::embedding_backward(out, dpos, dtype, dy, ids, types, s[0], s[1], s[2]);
      };
    }
    case OpKind::gather_rows_grad: {
      auto dy_s = shape_of(n, 0), pos = shape_of(n, 1);
      const float* dy = in_of(n, 0);
      const int32_t* positions = i32(n.inputs[1]);
      const int64_t S = n.attrs.at("seq");
      return [=] { ops::gather_rows_backward(out, dy, positions, pos[0], S, pos[1], dy_s[1]); };
    }
    case OpKind::first_token_grad: {
      auto s = shape_of(n, 0);
      const float* dy = in_of(n, 0);
      const int64_t S = n.attrs.at("seq");
      return [=] { ops::first_token_backward(out, dy, s[0], S, s[1]); };
    }
    default:
      fail("node '{}': op kind {} is not the gradient of a non-GEMM op", n.name, to_string(n.kind));
  }
}

// The two gradient GEMMs of a linear layer: dX = dY W (its weight copy made once per optimizer
// step under accumulation) and dW, db (reading the forward's kept bf16 copy of X when there is one).
std::function<void()> Executor::make_linear_grad_step(const Node& n) {
  float* out = out_of(n, 0);
  StepContext* ctx = &context_;
  switch (n.kind) {
    case OpKind::linear_grad_input: {
      auto gm = *node_gemm(graph_, n);
      const bool share = share_dy_.at(static_cast<size_t>(n.id));
      auto op = std::make_shared<ops::LinearGradInput>(gm.m, gm.k, gm.n, gemm_bf16(n), share,
                                                       gemm_b_packed(graph_, n));
      const float *dy = in_of(n, 0), *w = in_of(n, 1);
      if (op->weight_copy_bytes() == 0) return [=] { op->forward(out, dy, w); };  // w in place
      // The weights' bf16 or packed copy, made on every call or once per optimizer step.
      auto kept = std::make_shared<KeptWeight>(static_cast<int64_t>(op->weight_copy_bytes()), &kept_weight_bytes_);
      return [=] {
        if (!ctx->weights_version) return op->forward(out, dy, w);
        op->forward_cast(out, dy, kept->get(ctx->weights_version, [&](void* dst) { op->cast_weights_into(w, dst); }));
      };
    }
    case OpKind::linear_grad_weight: {
      float* db = out_of(n, 1);
      auto gm = *node_gemm(graph_, n);  // m = N, n = K, k = M
      const bool share = share_dy_.at(static_cast<size_t>(n.id));
      auto op = std::make_shared<ops::LinearGradWeight>(gm.k, gm.m, gm.n, gemm_bf16(n), share,
                                                        gemm_b_packed(graph_, n));
      const float *dy = in_of(n, 0), *x = in_of(n, 1);
      if (const KeptXCast& kept = kept_x_.at(static_cast<size_t>(n.id)); kept.role == KeptX::reads) {
        const auto& copy = kept_x_copies_.at(kept.linear);
        check(copy.size() == op->x_copy_bytes(), "node '{}': the kept copy of x has {} bytes, not {}", n.name,
              copy.size(), op->x_copy_bytes());
        const std::byte* x_copy = copy.data();
        return [=] { op->forward_cast_x(out, db, dy, x_copy); };
      }
      return [=] { op->forward(out, db, dy, x); };
    }
    default:
      fail("node '{}': op kind {} is not a linear layer's gradient", n.name, to_string(n.kind));
  }
}

// Attention scores and context, and their four gradients, on the fused (B, S, 3H) QKV tensor.
std::function<void()> Executor::make_attention_step(const Node& n) {
  float* out = out_of(n, 0);
  auto heads_and_d = [&](const Shape& qkv) {
    int64_t heads = n.attrs.at("heads");
    return std::pair{heads, qkv[2] / 3 / heads};
  };
  switch (n.kind) {
    case OpKind::attn_scores: {
      auto q = shape_of(n, 0);
      auto [heads, d] = heads_and_d(q);
      auto op = std::make_shared<ops::AttentionScores>(q[0], q[1], heads, d, n.attrs.at("scale").get<float>(),
                                                       gemm_bf16(n), handoff_.at(static_cast<size_t>(n.inputs[0])) != 0);
      const float *qkv = in_of(n, 0), *bias = in_of(n, 1);
      return [=] { op->forward(out, qkv, bias); };
    }
    case OpKind::attn_context: {
      auto q = shape_of(n, 1);
      auto [heads, d] = heads_and_d(q);
      auto op = std::make_shared<ops::AttentionContext>(q[0], q[1], heads, d, gemm_bf16(n),
                                                        handoff_.at(static_cast<size_t>(n.outputs[0])) != 0,
                                                        handoff_.at(static_cast<size_t>(n.inputs[1])) != 0,
                                                        handoff_.at(static_cast<size_t>(n.inputs[0])) != 0);
      const float *p = in_of(n, 0), *qkv = in_of(n, 1);
      return [=] { op->forward(out, p, qkv); };
    }
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k:
    case OpKind::attn_context_grad_probs:
    case OpKind::attn_context_grad_v: {
      using K = ops::AttentionGrad::Kind;
      K kind = n.kind == OpKind::attn_scores_grad_q   ? K::scores_q
               : n.kind == OpKind::attn_scores_grad_k ? K::scores_k
               : n.kind == OpKind::attn_context_grad_probs ? K::context_probs
                                                            : K::context_v;
      Shape qkv = n.kind == OpKind::attn_context_grad_v
                      ? Shape{shape_of(n, 0)[0], shape_of(n, 0)[1], 3 * shape_of(n, 0)[2]}
                      : shape_of(n, 1);
      auto [heads, d] = heads_and_d(qkv);
      float scale = n.attrs.value("scale", 1.0f);
      const bool probs_bf16 = kind == K::context_v && handoff_.at(static_cast<size_t>(n.inputs[1]));
      auto op = std::make_shared<ops::AttentionGrad>(kind, qkv[0], qkv[1], heads, d, scale, gemm_bf16(n),
                                                     shared_attn_.at(static_cast<size_t>(n.id)), probs_bf16);
      const float *a = in_of(n, 0), *b = in_of(n, 1);
      return [=] { op->forward(out, a, b); };
    }
    default:
      fail("node '{}': op kind {} is not an attention op", n.name, to_string(n.kind));
  }
}

// The steps after backward: the gradient allreduce, the global gradient norm and the optimizer.
std::function<void()> Executor::make_update_step(const Node& n) {
  float* out = out_of(n, 0);
  StepContext* ctx = &context_;
  switch (n.kind) {
    case OpKind::allreduce: {
      // Every gradient lives in the one gradient arena (alignment gaps are zero): its buckets
      // are summed in place over the ranks (runtime/grad_sync.h), overlapped with backward
      // unless the node says otherwise; this node waits for them all.
      auto& world = dist::World::get();
      const int64_t ranks = n.attrs.at("world_size").get<int64_t>();
      check(ranks == world.size(), "node '{}': the graph is built for {} ranks, this run has {} "
            "(start it with mpirun -np {})", n.name, ranks, world.size(), ranks);
      // The whole arena is summed: the gradients of parameters the graph does not train (the
      // pooler and NSP head under --no-nsp) stay zero on every rank.
      for (int t : n.inputs)
        check(graph_.tensor(t).role == Role::gradient && state_->grads.contains(param_of(graph_.tensor(t).name)),
              "node '{}': input '{}' is not the gradient of a parameter", n.name, graph_.tensor(t).name);
      const RunSpec::Allreduce defaults;
      sync_ = std::make_unique<GradientSync>(graph_, state_->grads, n.attrs.value("bucket_bytes", defaults.bucket_bytes),
                                             n.attrs.value("overlap", defaults.overlap),
                                             precision_from_string(n.attrs.value("precision", "fp32"), "allreduce precision"));
      GradientSync* sync = sync_.get();
      return [sync] { sync->finish(); };
    }
    case OpKind::grad_norm: {
      std::vector<std::pair<const float*, int64_t>> grads;
      for (int t : n.inputs) grads.emplace_back(f32(t), graph_.tensor(t).numel());
      return [=] {
        // One parallel region over all gradients, the same sum as sum_of_squares tensor by tensor.
        ctx->grad_norm = std::sqrt(ops::sum_of_squares_fused(grads));
        out[0] = static_cast<float>(ctx->grad_norm);
      };
    }
    case OpKind::adamw_update:
    case OpKind::lamb_update: {
      float *p = in_of(n, 0), *g = in_of(n, 1), *m = in_of(n, 2), *v = in_of(n, 3);
      const int64_t count = graph_.tensor(n.inputs[0]).numel();
      const bool decay = n.attrs.at("decay").get<bool>();
      const bool adamw = n.kind == OpKind::adamw_update;
      const int segments = n.attrs.value("segments", 1);
      return [=] {
        if (!std::isfinite(ctx->grad_norm)) return;  // diverged: leave the parameters as they are
        const ops::AdamHyper h = optimizer_hyper(*ctx);
        if (adamw)
          ops::adamw_update(p, m, v, g, count, h, decay);
        else
          ops::lamb_update(p, m, v, g, count, h, decay, segments);
      };
    }
    default:
      fail("node '{}': op kind {} is not a communication or optimizer op", n.name, to_string(n.kind));
  }
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

// Shape inference, FLOPs, minimal bytes and GEMM shapes of every op kind: one place, shared by
// the executor, the profiler and hwmodel. Conventions are documented in docs/graph-format.md.
#include "runtime/op_rules.h"

#include "base/error.h"

namespace bertlab {

namespace {

// FLOPs per element of the memory-bound ops.
constexpr double kSoftmaxFlops = 5;        // max, subtract, exp, sum, divide
constexpr double kSoftmaxGradFlops = 4;    // product, sum, subtract, multiply
constexpr double kLayernormFlops = 7;      // sum, subtract, square, sum, scale, gamma, beta
constexpr double kLayernormGradFlops = 12; // recompute stats, two reductions, dx, dgamma, dbeta
constexpr double kDropoutFlops = 2;        // hash compare, scale
constexpr double kCrossEntropyFlops = 4;   // max, exp, sum, log per logit
constexpr double kCrossEntropyGradFlops = 3;
constexpr double kAdamFlops = 12;          // moments (4), bias corrections, sqrt, divide, decay, update
constexpr double kLambFlops = 15;          // Adam's plus the two norms and the trust ratio

const TensorDesc& in_t(const Graph& g, const Node& n, size_t i) {
  check(i < n.inputs.size(), "node '{}' ({}) needs input {}, has {}", n.name, to_string(n.kind),
        i, n.inputs.size());
  return g.tensor(n.inputs[i]);
}
const Shape& in_shape(const Graph& g, const Node& n, size_t i) { return in_t(g, n, i).shape; }

void expect_rank(const Node& n, const Shape& s, size_t rank, const char* what) {
  check(s.size() == rank, "node '{}': {} must have rank {}, got shape {}", n.name, what, rank,
        shape_str(s));
}

int64_t int_attr(const Node& n, const char* key) {
  check(n.attrs.contains(key), "node '{}' ({}) lacks attribute '{}'", n.name, to_string(n.kind), key);
  return n.attrs.at(key).get<int64_t>();
}

// qkv (B,S,3H) with `heads` heads: returns d, checking the width.
int64_t head_size(const Node& n, const Shape& qkv) {
  int64_t heads = int_attr(n, "heads");
  expect_rank(n, qkv, 3, "qkv");
  check(heads > 0 && qkv[2] % (3 * heads) == 0,
        "node '{}': qkv width {} is not 3 x heads ({}) x head size", n.name, qkv[2], heads);
  return qkv[2] / 3 / heads;
}

using Outs = std::vector<std::pair<Shape, DType>>;
Outs f32(std::initializer_list<Shape> shapes) {
  Outs o;
  for (const auto& s : shapes) o.emplace_back(s, DType::f32);
  return o;
}

}  // namespace

bool recomputed_in_backward(const Node& n) {
  switch (op_info(n.kind).saved) {
    case Saved::kept: return false;
    case Saved::recomputed: return true;
    case Saved::per_activation: return !ops::activation_info(activation_of(n)).keep_output;
  }
  return false;
}

ops::Activation activation_of(const Node& n) {
  auto it = n.attrs.find("activation");
  const bool required = n.kind == OpKind::activation || n.kind == OpKind::activation_grad;
  if (it == n.attrs.end()) {
    check(!required, "node '{}' ({}) lacks attribute 'activation'", n.name, to_string(n.kind));
    return ops::Activation::none;
  }
  check(it->is_string(), "node '{}': attribute 'activation' must be a string, got {}", n.name, it->dump());
  ops::Activation a;
  try {
    a = ops::activation_from_string(it->get<std::string>());
  } catch (const Error& e) {
    fail("node '{}': {}", n.name, e.what());
  }
  check(!required || a != ops::Activation::none, "node '{}' ({}): attribute 'activation' is none",
        n.name, to_string(n.kind));
  return a;
}

namespace {
// infer_outputs of the backward, communication and optimizer kinds.
Outs infer_backward_outputs(const Graph& g, const Node& n) {
  auto same = [&](size_t i) { return f32({in_shape(g, n, i)}); };
  switch (n.kind) {
    case OpKind::linear_grad_input: {
      const auto& dy = in_shape(g, n, 0);
      const auto& w = in_shape(g, n, 1);
      expect_rank(n, w, 2, "weight");
      check(!dy.empty() && dy.back() == w[0], "node '{}': gradient {} does not match weight {}",
            n.name, shape_str(dy), shape_str(w));
      Shape dx = dy;
      dx.back() = w[1];
      return f32({dx});
    }
    case OpKind::linear_grad_weight: {
      const auto& dy = in_shape(g, n, 0);
      const auto& x = in_shape(g, n, 1);
      check(dy.size() == x.size() && numel(dy) / dy.back() == numel(x) / x.back(),
            "node '{}': gradient {} and input {} have different rows", n.name, shape_str(dy),
            shape_str(x));
      return f32({{dy.back(), x.back()}, {dy.back()}});
    }
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k: {
      const auto& ds = in_shape(g, n, 0);
      const auto& qkv = in_shape(g, n, 1);
      head_size(n, qkv);
      check(ds == Shape{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]},
            "node '{}': score gradient {} does not match qkv {}", n.name, shape_str(ds), shape_str(qkv));
      return same(1);
    }
    case OpKind::attn_context_grad_probs: {
      const auto& dctx = in_shape(g, n, 0);
      const auto& qkv = in_shape(g, n, 1);
      head_size(n, qkv);
      check(dctx == Shape{qkv[0], qkv[1], qkv[2] / 3}, "node '{}': context gradient {} does not match qkv {}",
            n.name, shape_str(dctx), shape_str(qkv));
      return f32({{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}});
    }
    case OpKind::attn_context_grad_v: {
      const auto& dctx = in_shape(g, n, 0);
      const auto& p = in_shape(g, n, 1);
      expect_rank(n, dctx, 3, "context gradient");
      check(p == Shape{dctx[0], int_attr(n, "heads"), dctx[1], dctx[1]},
            "node '{}': probs {} do not match context gradient {}", n.name, shape_str(p), shape_str(dctx));
      return f32({{dctx[0], dctx[1], 3 * dctx[2]}});
    }
    case OpKind::activation_grad:
      activation_of(n);
      [[fallthrough]];
    case OpKind::softmax_grad:
      check(in_shape(g, n, 0) == in_shape(g, n, 1), "node '{}': gradient {} does not match {}",
            n.name, shape_str(in_shape(g, n, 0)), shape_str(in_shape(g, n, 1)));
      return same(0);
    case OpKind::layernorm_grad: {
      const auto& x = in_shape(g, n, 1);
      check(in_shape(g, n, 0) == x && in_shape(g, n, 2) == Shape{x.back()},
            "node '{}': gradient {}, input {} and gamma {} disagree", n.name,
            shape_str(in_shape(g, n, 0)), shape_str(x), shape_str(in_shape(g, n, 2)));
      return f32({x, {x.back()}, {x.back()}});
    }
    case OpKind::embedding_grad: {
      const auto& d = in_shape(g, n, 0);
      expect_rank(n, d, 3, "gradient");
      return f32({{int_attr(n, "vocab"), d[2]}, {int_attr(n, "positions"), d[2]},
                  {int_attr(n, "types"), d[2]}});
    }
    case OpKind::gather_rows_grad: {
      const auto& dy = in_shape(g, n, 0);
      const auto& pos = in_shape(g, n, 1);
      expect_rank(n, dy, 2, "gradient");
      check(dy[0] == numel(pos), "node '{}': gradient {} does not match positions {}", n.name,
            shape_str(dy), shape_str(pos));
      return f32({{pos[0], int_attr(n, "seq"), dy[1]}});
    }
    case OpKind::first_token_grad: {
      const auto& dy = in_shape(g, n, 0);
      expect_rank(n, dy, 2, "gradient");
      return f32({{dy[0], int_attr(n, "seq"), dy[1]}});
    }
    case OpKind::grad_norm:
      check(!n.inputs.empty(), "node '{}': needs at least one gradient", n.name);
      return f32({{1}});
    case OpKind::allreduce: {
      check(!n.inputs.empty(), "node '{}': needs at least one gradient", n.name);
      check(int_attr(n, "world_size") >= 2, "node '{}': attribute 'world_size' must be at least 2", n.name);
      Outs o;  // in place: every input is an output of the same shape
      for (size_t i = 0; i < n.inputs.size(); ++i) o.emplace_back(in_shape(g, n, i), DType::f32);
      return o;
    }
    case OpKind::adamw_update:
    case OpKind::lamb_update: {
      const auto& p = in_shape(g, n, 0);
      for (size_t i = 1; i < 4; ++i)
        check(in_shape(g, n, i) == p, "node '{}': input {} has shape {}, parameter {}", n.name, i,
              shape_str(in_shape(g, n, i)), shape_str(p));
      return f32({p, p, p});
    }
    default:
      fail("node '{}': op kind {} is not a backward, communication or optimizer op", n.name, to_string(n.kind));
  }
}
}  // namespace

Outs infer_outputs(const Graph& g, const Node& n) {
  auto same = [&](size_t i) { return f32({in_shape(g, n, i)}); };
  switch (n.kind) {
    case OpKind::embedding: {
      const auto& ids = in_shape(g, n, 0);
      expect_rank(n, ids, 2, "input_ids");
      check(in_shape(g, n, 1) == ids, "node '{}': token_type_ids shape {} differs from input_ids {}",
            n.name, shape_str(in_shape(g, n, 1)), shape_str(ids));
      const auto& word = in_shape(g, n, 2);
      const auto& pos = in_shape(g, n, 3);
      const auto& type = in_shape(g, n, 4);
      expect_rank(n, word, 2, "word embeddings");
      check(pos.size() == 2 && type.size() == 2 && pos[1] == word[1] && type[1] == word[1],
            "node '{}': embedding tables disagree on hidden size: word {}, position {}, type {}",
            n.name, shape_str(word), shape_str(pos), shape_str(type));
      check(ids[1] <= pos[0], "node '{}': sequence length {} exceeds max_position_embeddings {}",
            n.name, ids[1], pos[0]);
      return f32({{ids[0], ids[1], word[1]}});
    }
    case OpKind::mask_bias:
      expect_rank(n, in_shape(g, n, 0), 2, "attention_mask");
      return same(0);
    case OpKind::linear: {
      const auto& x = in_shape(g, n, 0);
      const auto& w = in_shape(g, n, 1);
      const auto& b = in_shape(g, n, 2);
      expect_rank(n, w, 2, "weight");
      check(!x.empty() && x.back() == w[1], "node '{}': input {} does not match weight {} (N x K)",
            n.name, shape_str(x), shape_str(w));
      check(b == Shape{w[0]}, "node '{}': bias {} does not match weight {}", n.name, shape_str(b),
            shape_str(w));
      Shape y = x;
      y.back() = w[0];
      if (n.inputs.size() > 3)
        check(in_shape(g, n, 3) == y, "node '{}': residual {} does not match output {}", n.name,
              shape_str(in_shape(g, n, 3)), shape_str(y));
      return f32({y});
    }
    case OpKind::attn_scores: {
      const auto& qkv = in_shape(g, n, 0);
      head_size(n, qkv);
      check(in_shape(g, n, 1) == Shape{qkv[0], qkv[1]}, "node '{}': mask bias {} is not [B, S]",
            n.name, shape_str(in_shape(g, n, 1)));
      return f32({{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]}});
    }
    case OpKind::attn_context: {
      const auto& p = in_shape(g, n, 0);
      const auto& qkv = in_shape(g, n, 1);
      expect_rank(n, p, 4, "probs");
      head_size(n, qkv);
      check(p == Shape{qkv[0], int_attr(n, "heads"), qkv[1], qkv[1]},
            "node '{}': probs {} do not match qkv {}", n.name, shape_str(p), shape_str(qkv));
      return f32({{qkv[0], qkv[1], qkv[2] / 3}});
    }
    case OpKind::add:
      check(in_shape(g, n, 0) == in_shape(g, n, 1), "node '{}': cannot add {} and {}", n.name,
            shape_str(in_shape(g, n, 0)), shape_str(in_shape(g, n, 1)));
      return same(0);
    case OpKind::layernorm: {
      const auto& x = in_shape(g, n, 0);
      check(!x.empty() && in_shape(g, n, 1) == Shape{x.back()} &&
                in_shape(g, n, 2) == Shape{x.back()},
            "node '{}': gamma {} / beta {} do not match input {}", n.name,
            shape_str(in_shape(g, n, 1)), shape_str(in_shape(g, n, 2)), shape_str(x));
      return same(0);
    }
    case OpKind::activation:
      activation_of(n);
      return same(0);
    case OpKind::softmax:
    case OpKind::dropout:
    case OpKind::dropout_grad:
    case OpKind::scale:
      return same(0);
    case OpKind::first_token: {
      const auto& x = in_shape(g, n, 0);
      expect_rank(n, x, 3, "input");
      return f32({{x[0], x[2]}});
    }
    case OpKind::gather_rows: {
      const auto& x = in_shape(g, n, 0);
      const auto& pos = in_shape(g, n, 1);
      expect_rank(n, x, 3, "input");
      expect_rank(n, pos, 2, "positions");
      check(pos[0] == x[0], "node '{}': positions {} do not match input {}", n.name,
            shape_str(pos), shape_str(x));
      return f32({{pos[0] * pos[1], x[2]}});
    }
    case OpKind::cross_entropy:
    case OpKind::cross_entropy_grad: {
      const auto& logits = in_shape(g, n, 0);
      expect_rank(n, logits, 2, "logits");
      check(in_shape(g, n, 1) == Shape{logits[0]}, "node '{}': labels {} do not match logits {}",
            n.name, shape_str(in_shape(g, n, 1)), shape_str(logits));
      return n.kind == OpKind::cross_entropy ? f32({{3}}) : same(0);
    }
    case OpKind::linear_grad_input:
    case OpKind::linear_grad_weight:
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k:
    case OpKind::attn_context_grad_probs:
    case OpKind::attn_context_grad_v:
    case OpKind::activation_grad:
    case OpKind::softmax_grad:
    case OpKind::layernorm_grad:
    case OpKind::embedding_grad:
    case OpKind::gather_rows_grad:
    case OpKind::first_token_grad:
    case OpKind::grad_norm:
    case OpKind::allreduce:
    case OpKind::adamw_update:
    case OpKind::lamb_update:
      return infer_backward_outputs(g, n);
  }
  fail("node '{}': unhandled op kind", n.name);
}

Precision gemm_precision(const Node& n) {
  auto it = n.attrs.find("precision");
  if (it == n.attrs.end()) return Precision::fp32;
  check(it->is_string() && (*it == "fp32" || *it == "bf16"),
        "node '{}': attribute 'precision' must be \"fp32\" or \"bf16\", got {}", n.name, it->dump());
  return precision_from_string(it->get<std::string>());
}

void set_gemm_precision(Graph& g, Precision precision) {
  for (const auto& n : g.nodes()) {
    if (!node_gemm(g, n)) continue;
    auto& attrs = g.node(n.id).attrs;
    switch (precision) {
      case Precision::bf16: attrs["precision"] = to_string(precision); break;
      case Precision::fp32: attrs.erase("precision"); break;
    }
  }
}

std::optional<GemmShape> node_gemm(const Graph& g, const Node& n) {
  auto rows = [](const Shape& s) { return numel(s) / s.back(); };
  // Per batch and head, products giving scores are S x S x d; those giving Q, K or V are S x d x S.
  auto to_scores = [&](const Shape& qkv, bool ta, bool tb) {
    int64_t heads = int_attr(n, "heads");
    return GemmShape{qkv[0] * heads, qkv[1], qkv[1], qkv[2] / 3 / heads, ta, tb};
  };
  auto to_heads = [&](const Shape& qkv, bool ta, bool tb) {
    int64_t heads = int_attr(n, "heads");
    return GemmShape{qkv[0] * heads, qkv[1], qkv[2] / 3 / heads, qkv[1], ta, tb};
  };
  switch (n.kind) {
    case OpKind::linear: {
      const auto& x = in_shape(g, n, 0);
      const auto& w = in_shape(g, n, 1);
      return GemmShape{1, rows(x), w[0], w[1], false, true};
    }
    case OpKind::linear_grad_input: {  // dx(M,K) = dy(M,N) w(N,K)
      const auto& dy = in_shape(g, n, 0);
      const auto& w = in_shape(g, n, 1);
      return GemmShape{1, rows(dy), w[1], w[0], false, false};
    }
    case OpKind::linear_grad_weight: {  // dw(N,K) = dy^T(N,M) x(M,K)
      const auto& dy = in_shape(g, n, 0);
      const auto& x = in_shape(g, n, 1);
      return GemmShape{1, dy.back(), x.back(), rows(dy), true, false};
    }
    case OpKind::attn_scores:  // Q K^T
      return to_scores(in_shape(g, n, 0), false, true);
    case OpKind::attn_context:  // P V
      return to_heads(in_shape(g, n, 1), false, false);
    case OpKind::attn_scores_grad_q:  // dS K
      return to_heads(in_shape(g, n, 1), false, false);
    case OpKind::attn_scores_grad_k:  // dS^T Q
      return to_heads(in_shape(g, n, 1), true, false);
    case OpKind::attn_context_grad_probs:  // dctx V^T
      return to_scores(in_shape(g, n, 1), false, true);
    case OpKind::attn_context_grad_v: {  // P^T dctx
      const auto& dctx = in_shape(g, n, 0);
      return to_heads(Shape{dctx[0], dctx[1], 3 * dctx[2]}, true, false);
    }
    case OpKind::embedding:
    case OpKind::mask_bias:
    case OpKind::softmax:
    case OpKind::add:
    case OpKind::scale:
    case OpKind::layernorm:
    case OpKind::activation:
    case OpKind::first_token:
    case OpKind::dropout:
    case OpKind::gather_rows:
    case OpKind::cross_entropy:
    case OpKind::cross_entropy_grad:
    case OpKind::softmax_grad:
    case OpKind::layernorm_grad:
    case OpKind::activation_grad:
    case OpKind::dropout_grad:
    case OpKind::embedding_grad:
    case OpKind::gather_rows_grad:
    case OpKind::first_token_grad:
    case OpKind::grad_norm:
    case OpKind::adamw_update:
    case OpKind::lamb_update:
    case OpKind::allreduce:
      return std::nullopt;
  }
  return std::nullopt;
}

double node_flops(const Graph& g, const Node& n) {
  const double out = static_cast<double>(g.tensor(n.outputs.at(0)).numel());
  const double in0 = static_cast<double>(in_t(g, n, 0).numel());
  auto gemm = [&] { return node_gemm(g, n)->flops(); };
  switch (n.kind) {
    case OpKind::linear: {
      // GEMM, bias add, optional residual add, optional fused activation.
      double f = gemm() + out;
      if (n.inputs.size() > 3) f += out;
      return f + out * ops::activation_info(activation_of(n)).forward_flops;
    }
    case OpKind::attn_scores:
      return gemm() + 2 * out;  // scale and mask bias
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k:
      return gemm() + gemm() / (2.0 * node_gemm(g, n)->k);  // GEMM and the scale
    case OpKind::linear_grad_weight:
      return gemm() + in0;  // GEMM and the bias-gradient reduction
    case OpKind::attn_context:
    case OpKind::linear_grad_input:
    case OpKind::attn_context_grad_probs:
    case OpKind::attn_context_grad_v:
      return gemm();
    case OpKind::embedding:
      return 2 * out;  // word + position + type
    case OpKind::embedding_grad:
      return 3 * in0;  // three scatter-adds per gradient element
    case OpKind::mask_bias:
    case OpKind::add:
    case OpKind::scale:
    case OpKind::gather_rows_grad:
    case OpKind::first_token_grad:
      return in0;
    case OpKind::softmax:
      return kSoftmaxFlops * out;
    case OpKind::softmax_grad:
      return kSoftmaxGradFlops * out;
    case OpKind::layernorm:
      return kLayernormFlops * out;
    case OpKind::layernorm_grad:
      return kLayernormGradFlops * out;
    case OpKind::activation:
      return ops::activation_info(activation_of(n)).forward_flops * out;
    case OpKind::activation_grad:
      return ops::activation_info(activation_of(n)).backward_flops * out;
    case OpKind::dropout:
    case OpKind::dropout_grad:
      return kDropoutFlops * out;
    case OpKind::cross_entropy:
      return kCrossEntropyFlops * in0;
    case OpKind::cross_entropy_grad:
      return kCrossEntropyGradFlops * in0;
    case OpKind::first_token:
    case OpKind::gather_rows:
      return 0;
    case OpKind::grad_norm: {
      double total = 0;
      for (int t : n.inputs) total += 2.0 * g.tensor(t).numel();  // square and sum
      return total;
    }
    case OpKind::adamw_update:
      return kAdamFlops * in0;
    case OpKind::lamb_update:
      return kLambFlops * in0;
    case OpKind::allreduce: {
      // A ring allreduce's reduce-scatter: each rank adds (W-1)/W of the elements once.
      double total = 0;
      for (int t : n.inputs) total += static_cast<double>(g.tensor(t).numel());
      const double w = static_cast<double>(int_attr(n, "world_size"));
      return total * (w - 1) / w;
    }
  }
  return 0;
}

int64_t node_min_bytes(const Graph& g, const Node& n) {
  auto bytes = [&](int t) { return g.tensor(t).bytes(); };
  auto in = [&](size_t i) { return bytes(n.inputs.at(i)); };
  auto out = [&](size_t i) { return bytes(n.outputs.at(i)); };
  switch (n.kind) {
    case OpKind::embedding:
      return in(0) + in(1) + 3 * out(0) + out(0);  // ids, one gathered row per table, output
    case OpKind::first_token:
      return 2 * out(0);  // the first row of each sequence read, then written
    case OpKind::gather_rows:
      return in(1) + 2 * out(0);  // positions, the gathered rows read, then written
    case OpKind::attn_scores:
      return in(0) * 2 / 3 + in(1) + out(0);  // Q and K thirds of qkv
    case OpKind::attn_context:
      return in(0) + in(1) / 3 + out(0);  // V third of qkv
    case OpKind::attn_scores_grad_q:
    case OpKind::attn_scores_grad_k:
      return in(0) + in(1) / 3 + out(0) / 3;  // dS, K (or Q), one third of dqkv written
    case OpKind::attn_context_grad_probs:
      return in(0) + in(1) / 3 + out(0);  // dctx, V, dprobs
    case OpKind::attn_context_grad_v:
      return in(0) + in(1) + out(0) / 3;  // dctx, probs, V third of dqkv
    case OpKind::linear_grad_weight:
      return in(0) + in(1) + 2 * out(0) + 2 * out(1);  // dw and db are read and written (+=)
    case OpKind::layernorm_grad:
      return in(0) + in(1) + in(2) + out(0) + 2 * out(1) + 2 * out(2);
    case OpKind::embedding_grad:
      // ids, type ids, the gradient, and a read-modify-write of one row per table per token.
      return in(0) + in(1) + in(2) + 6 * in(0);
    case OpKind::gather_rows_grad:
    case OpKind::first_token_grad:
      return in(0) + (n.inputs.size() > 1 ? in(1) : 0) + out(0);  // zero fill and scatter
    case OpKind::dropout:
    case OpKind::dropout_grad:
      return in(0) + out(0);  // the mask is recomputed, not stored
    case OpKind::adamw_update:
    case OpKind::lamb_update:
      return 4 * in(0) + 3 * out(0);  // read param, grad, m, v; write param, m, v
    case OpKind::allreduce: {
      // Local memory traffic of a ring allreduce: each gradient read and written once per
      // phase (reduce-scatter, allgather). The bytes on the wire, 2 (W-1)/W of the gradients
      // per rank, are not memory traffic.
      int64_t total = 0;
      for (int t : n.inputs) total += bytes(t);
      return 4 * total;
    }
    case OpKind::mask_bias:
    case OpKind::linear:
    case OpKind::softmax:
    case OpKind::add:
    case OpKind::scale:
    case OpKind::layernorm:
    case OpKind::activation:
    case OpKind::cross_entropy:
    case OpKind::cross_entropy_grad:
    case OpKind::linear_grad_input:
    case OpKind::softmax_grad:
    case OpKind::activation_grad:
    case OpKind::grad_norm: {
      int64_t total = 0;
      for (int t : n.inputs) total += bytes(t);
      for (int t : n.outputs) total += bytes(t);
      return total;
    }
  }
  return 0;
}

}  // namespace bertlab

// The graph rules of runtime/step_rules.h.
#include "runtime/step_rules.h"

#include <algorithm>
#include <functional>

#include "runtime/fusion.h"

namespace bertlab {

namespace {
// Whether tensor t has readers, is not a graph output, and every reader `reads_as`.
template <class Pred>
bool read_only_as(const TensorUses& uses, int t, Pred reads_as) {
  const auto& readers = uses.readers.at(static_cast<size_t>(t));
  return !readers.empty() && !uses.is_output.at(static_cast<size_t>(t)) &&
         std::all_of(readers.begin(), readers.end(), reads_as);
}
}  // namespace

std::vector<char> bf16_linear_handoffs(const Graph& g) {
  const TensorUses uses(g);
  std::vector<char> handoff(g.tensors().size(), 0);
  auto bf16_linear = [](const Node& n) { return n.kind == OpKind::linear && gemm_bf16(n); };
  for (const Node& producer : g.nodes()) {
    const bool linear = bf16_linear(producer) && producer.inputs.size() <= 3;  // a residual: not handed over
    const bool context = producer.kind == OpKind::attn_context && gemm_bf16(producer);  // P V
    if (!linear && !context) continue;
    const int t = producer.outputs.at(0), reader = uses.sole_reader(t);
    // x of a bf16 linear layer, its only reader.
    const bool to_linear = reader >= 0 && bf16_linear(g.node(reader)) && g.node(reader).inputs.at(0) == t;
    // The fused qkv, read only as qkv by bf16 attention score and context products.
    const bool to_attention = linear && read_only_as(uses, t, [&](int r) {
      const Node& n = g.node(r);
      return gemm_bf16(n) && ((n.kind == OpKind::attn_scores && n.inputs.at(0) == t) ||
                              (n.kind == OpKind::attn_context && n.inputs.at(1) == t && n.inputs.at(0) != t));
    });
    if (to_linear || to_attention) handoff[static_cast<size_t>(t)] = 1;
  }
  return handoff;
}

std::vector<char> bf16_probs_handoffs(const Graph& g) {
  const TensorUses uses(g);
  std::vector<char> handoff(g.tensors().size(), 0);
  for (const Node& drop : g.nodes()) {
    if (drop.kind != OpKind::dropout) continue;
    const int t = drop.outputs.at(0);
    const bool probs = read_only_as(uses, t, [&](int r) {
      const Node& n = g.node(r);
      if (!gemm_bf16(n)) return false;
      if (n.kind == OpKind::attn_context) return n.inputs.at(0) == t && n.inputs.at(1) != t;
      if (n.kind == OpKind::attn_context_grad_v) return n.inputs.at(1) == t && n.inputs.at(0) != t;
      return false;
    });
    if (probs) handoff[static_cast<size_t>(t)] = 1;
  }
  return handoff;
}

std::vector<char> bf16_handoffs(const Graph& g, bool training) {
  std::vector<char> handoff = bf16_probs_handoffs(g);
  if (training) return handoff;
  const auto linear = bf16_linear_handoffs(g);
  for (size_t t = 0; t < handoff.size(); ++t) handoff[t] |= linear[t];
  return handoff;
}

bool gemm_b_packed(const Graph& g, const Node& n) {
  auto fits = [&] {
    const auto gm = *node_gemm(g, n);  // B is k x n: the weight, or x of linear_grad_weight
    return gm.k * gm.n * int64_t(sizeof(float)) <= kLargeWeightBytes;
  };
  if (n.kind == OpKind::linear) return fits();
  if (n.kind == OpKind::linear_grad_input || n.kind == OpKind::linear_grad_weight) return !gemm_bf16(n) && fits();
  return false;  // attention GEMMs read their operands in place (or cast in bf16); other nodes
}

std::vector<char> shared_dy_casts(const Graph& g) {
  // bf16: a linear layer's dX GEMM casts dy to bf16, and its dW GEMM reads the same bf16 values
  // (as dy^T). The pair shares one cast, kept in scratch slot kSharedDySlot, when no other bf16
  // dX GEMM (the only writers of that slot) runs between the two. All nodes run on one thread,
  // in graph order, and dy is not written between its readers (it is live until the dW GEMM).
  const auto& nodes = g.nodes();
  std::vector<char> share(nodes.size(), 0);
  int last_input = -1;  // the latest bf16 linear_grad_input node
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!gemm_bf16(n)) continue;
    if (n.kind == OpKind::linear_grad_input) last_input = static_cast<int>(i);
    if (n.kind != OpKind::linear_grad_weight || last_input < 0) continue;
    const Node& gi = nodes[static_cast<size_t>(last_input)];
    if (gi.inputs.at(0) != n.inputs.at(0) || gi.phase != n.phase) continue;
    share[static_cast<size_t>(last_input)] = share[i] = 1;
  }
  return share;
}

std::vector<uint8_t> shared_attention_casts(const Graph& g) {
  // bf16: the attention GEMMs cast their inputs into the calling thread's scratch slots
  // (ops::AttentionGrad, ops::AttentionScores). All nodes run on one thread in graph order, and
  // every GEMM node (and only those) writes slots 0 and 1, so a copy there is intact until the
  // next GEMM node; kQSlot and kKSlot are written by attention score nodes alone. A tensor read
  // by a later node is not written before that read (it is live until then). Writer and reader
  // are in one phase, which a run executes whole (another executor on the thread may run
  // between phases).
  const auto& nodes = g.nodes();
  std::vector<uint8_t> reuse(nodes.size(), 0);
  const Node* prev_gemm = nullptr;  // the latest GEMM node, any precision
  const Node* scores = nullptr;     // the latest bf16 attn_scores node
  for (const Node& n : nodes) {
    if (!node_gemm(g, n)) continue;
    const bool bf16 = gemm_bf16(n);
    auto after = [&](OpKind k) {  // right after a bf16 node of kind k on the same first input
      return prev_gemm && prev_gemm->kind == k && gemm_bf16(*prev_gemm) && prev_gemm->phase == n.phase &&
             prev_gemm->inputs.at(0) == n.inputs.at(0) && prev_gemm->attrs.value("heads", 0) == n.attrs.value("heads", 0);
    };
    // Q (dK) and K (dQ): cast by the latest attn_scores on the same qkv.
    const bool qk = scores && scores->phase == n.phase && scores->inputs.at(0) == n.inputs.at(1) &&
                    scores->attrs.value("heads", 0) == n.attrs.value("heads", 0);
    uint8_t& r = reuse[static_cast<size_t>(n.id)];
    if (bf16) switch (n.kind) {
      case OpKind::attn_context_grad_v:  // dctx, which context_grad_probs cast into slot 0
        r = after(OpKind::attn_context_grad_probs) ? 1 : 0;
        break;
      case OpKind::attn_scores_grad_k:  // dS, which scores_grad_q cast into slot 0 (read transposed)
        r = static_cast<uint8_t>((after(OpKind::attn_scores_grad_q) ? 1 : 0) | (qk ? 2 : 0));
        break;
      case OpKind::attn_scores_grad_q:
        r = qk ? 2 : 0;
        break;
      default:
        break;
    }
    if (n.kind == OpKind::attn_scores) scores = bf16 ? &n : nullptr;
    prev_gemm = &n;
  }
  return reuse;
}

std::vector<KeptXCast> kept_x_casts(const Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<KeptXCast> kept(nodes.size());
  std::vector<int> producer(g.tensors().size(), -1);
  for (const auto& n : nodes)
    for (int t : n.outputs) producer.at(static_cast<size_t>(t)) = n.id;
  // Whether tensor r holds the values of forward tensor f: f itself, or the output of a
  // recomputation (is_recomputation) of f's producer, the same op and attributes on inputs that
  // hold the same values in turn. Recomputations run the same primitives with the same dropout
  // keys, so the values are the same bits.
  std::function<bool(int, int)> same_values = [&](int f, int r) {
    if (f == r) return true;
    const int pf = producer.at(static_cast<size_t>(f)), pr = producer.at(static_cast<size_t>(r));
    if (pf < 0 || pr < 0) return false;
    const Node &a = g.node(pf), &b = g.node(pr);
    auto attrs = b.attrs;
    attrs.erase(kRecomputedAttr);
    if (!is_recomputation(b) || b.kind != a.kind || attrs != a.attrs || b.inputs.size() != a.inputs.size() ||
        a.outputs.size() != 1 || b.outputs.size() != 1)
      return false;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (!same_values(a.inputs[i], b.inputs[i])) return false;
    return true;
  };
  const TensorUses uses(g);
  // A linear layer's dW node (dy, x) and its dX node (dy, W) read the same dy (autodiff), so the
  // dX node names the weight, and the weight its forward linear layer: found by the tensors,
  // not by names. No pairing when that is not one node each (a speed rule only).
  auto sole = [&](int t, OpKind kind) {
    int found = -1;
    for (int id : uses.readers.at(static_cast<size_t>(t)))
      if (g.node(id).kind == kind) {
        if (found >= 0) return -1;
        found = id;
      }
    return found;
  };
  for (const auto& w : nodes) {
    if (w.kind != OpKind::linear_grad_weight || !gemm_bf16(w)) continue;
    const int gi = sole(w.inputs.at(0), OpKind::linear_grad_input);
    const int lin = gi < 0 ? -1 : sole(g.node(gi).inputs.at(1), OpKind::linear);
    const int x = w.inputs.at(1), r = producer.at(static_cast<size_t>(x));
    if (lin < 0 || r < 0 || uses.sole_reader(x) != w.id) continue;
    const Node& l = g.node(lin);
    if (!gemm_bf16(l) || l.phase != Phase::forward || !is_recomputation(g.node(r)) ||
        !same_values(l.inputs.at(0), x))
      continue;
    kept[static_cast<size_t>(l.id)] = {KeptX::keeps, l.id};
    kept[static_cast<size_t>(w.id)] = {KeptX::reads, l.id};
    kept[static_cast<size_t>(r)] = {KeptX::skipped, l.id};
  }
  return kept;
}

std::vector<uint8_t> fused_steps(const Graph& g, int64_t threads) {
  const auto& nodes = g.nodes();
  const TensorUses uses(g);
  std::vector<uint8_t> run(nodes.size(), 1);
  // Whether node i's output is read by node i + 1 alone, in the same phase.
  auto feeds_next = [&](size_t i) {
    return i + 1 < nodes.size() && nodes[i].phase == nodes[i + 1].phase &&
           uses.sole_reader(nodes[i].outputs.at(0)) == nodes[i + 1].id;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!feeds_next(i)) continue;
    const Node &a = nodes[i], &b = nodes[i + 1];
    const int t = a.outputs.at(0);  // what a writes and only b reads
    const Shape& s = g.tensor(t).shape;
    auto same_shape = [&](std::initializer_list<int> ts) {
      return std::all_of(ts.begin(), ts.end(), [&](int u) { return g.tensor(u).shape == s; });
    };
    uint8_t n = 1;
    if (a.kind == OpKind::dropout && b.kind == OpKind::add) {
      const int r = b.inputs.at(0) == t ? b.inputs.at(1) : b.inputs.at(0);  // the residual
      if (same_shape({a.inputs.at(0), r, b.outputs.at(0)})) n = kFusedPair;
    } else if (a.kind == OpKind::dropout_grad && b.kind == OpKind::softmax_grad) {
      if (b.inputs.at(0) == t && same_shape({a.inputs.at(0), b.inputs.at(1)})) n = kFusedPair;  // dy, then y
    } else if (a.kind == OpKind::attn_scores && b.kind == OpKind::softmax && feeds_next(i + 1) &&
               g.tensor(a.inputs.at(0)).shape.at(0) >= threads) {
      // The context product reads the probabilities as P and the scores' own qkv.
      const Node& c = nodes[i + 2];
      if (c.kind == OpKind::attn_context && c.inputs.at(0) == b.outputs.at(0) && c.inputs.at(1) == a.inputs.at(0) &&
          c.attrs.value("heads", 0) == a.attrs.value("heads", -1))
        n = kFusedAttention;
    }
    run[i] = n;
    for (uint8_t k = 1; k < n; ++k) run[i + k] = 0;
    i += n - 1;
  }
  return run;
}

std::vector<int64_t> optimizer_runs(const Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<int64_t> run(nodes.size(), 1);
  for (size_t first = 0; first < nodes.size();) {
    const OpKind kind = nodes[first].kind;
    if (kind != OpKind::adamw_update && kind != OpKind::lamb_update) {
      ++first;
      continue;
    }
    size_t last = first + 1;
    while (last < nodes.size() && nodes[last].kind == kind && nodes[last].phase == nodes[first].phase) run[last++] = 0;
    run[first] = static_cast<int64_t>(last - first);
    first = last;
  }
  return run;
}

}  // namespace bertlab

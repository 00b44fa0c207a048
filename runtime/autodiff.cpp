#include "runtime/autodiff.h"

#include <map>
#include <set>

#include "base/error.h"
#include "runtime/op_rules.h"

namespace bertlab {

std::string grad_name(const std::string& p) { return "grad:" + p; }
std::string exp_avg_name(const std::string& p) { return "exp_avg:" + p; }
std::string exp_avg_sq_name(const std::string& p) { return "exp_avg_sq:" + p; }
std::string param_of(const std::string& t) {
  auto colon = t.find(':');
  return colon == std::string::npos ? t : t.substr(colon + 1);
}

namespace {

class Differentiator {
 public:
  explicit Differentiator(Graph& g) : g_(g) {}

  std::vector<int> run(const std::vector<std::string>& loss_nodes,
                       const std::vector<std::pair<int, int>>& seeds = {}, const std::vector<int>& wrt = {}) {
    wanted_.insert(wrt.begin(), wrt.end());
    for (const auto& [y, dy] : seeds) {
      check(g_.tensor(y).shape == g_.tensor(dy).shape, "seed gradient '{}' {} does not match '{}' {}",
            g_.tensor(dy).name, shape_str(g_.tensor(dy).shape), g_.tensor(y).name, shape_str(g_.tensor(y).shape));
      grads_[y] = dy;
    }
    const int forward_count = static_cast<int>(g_.nodes().size());
    producer_.assign(g_.tensors().size(), -1);
    for (const auto& n : g_.nodes())
      for (int t : n.outputs) producer_[t] = n.id;
    std::vector<bool> is_loss(forward_count, false);
    for (const auto& name : loss_nodes) {
      auto id = g_.find_node(name);
      check(id.has_value(), "loss node '{}' is not in the graph", name);
      is_loss[*id] = true;
    }
    for (int id = forward_count - 1; id >= 0; --id) {
      const Node n = g_.node(id);  // copy: emitting nodes reallocates the node list
      region_ = n.attrs.value("region", nlohmann::json());
      if (is_loss[id]) {
        seed_loss(n);
      } else if (n.kind != OpKind::cross_entropy) {
        backward(n);
      }
    }
    std::vector<int> out;
    for (int t : wrt) {
      auto a = grads_.find(t);
      auto p = param_grads_.find(t);
      out.push_back(a != grads_.end() ? a->second : p != param_grads_.end() ? p->second : -1);
    }
    return out;
  }

 private:
  // Emits a backward node; outputs[i] >= 0 names an existing tensor, -1 asks for a new one.
  std::vector<int> emit(OpKind kind, const std::string& name, std::vector<int> inputs,
                        std::vector<int> outputs, nlohmann::json attrs = nlohmann::json::object(),
                        Phase phase = Phase::backward) {
    Node n;
    n.name = name;
    n.kind = kind;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    // The region of the forward node differentiated (a recomputation keeps its own).
    if (!region_.is_null() && !n.attrs.contains("region")) n.attrs["region"] = region_;
    n.phase = phase;
    auto shapes = infer_outputs(g_, n);
    outputs.resize(shapes.size(), -1);
    for (size_t i = 0; i < shapes.size(); ++i)
      if (outputs[i] < 0)
        outputs[i] = g_.add_tensor(shapes.size() == 1 ? name + ".out" : fmt::format("{}.out{}", name, i),
                                   shapes[i].first, shapes[i].second, Role::activation);
    n.outputs = outputs;
    g_.append_node(std::move(n));
    return outputs;
  }
  int emit1(OpKind kind, const std::string& name, std::vector<int> inputs,
            nlohmann::json attrs = nlohmann::json::object()) {
    return emit(kind, name, std::move(inputs), {}, std::move(attrs))[0];
  }

  int param_grad(int weight) {
    auto it = param_grads_.find(weight);
    if (it != param_grads_.end()) return it->second;
    const auto& w = g_.tensor(weight);
    check(w.role == Role::weight, "tensor '{}' is not a parameter", w.name);
    int id = g_.add_tensor(grad_name(w.name), w.shape, DType::f32, Role::gradient);
    param_grads_[weight] = id;
    return id;
  }

  // Adds a gradient contribution to an activation (summing when one already exists).
  void contribute(int tensor, int grad) {
    const auto role = g_.tensor(tensor).role;
    if ((role == Role::input || role == Role::weight) && !wanted_.count(tensor)) return;
    auto it = grads_.find(tensor);
    if (it == grads_.end()) {
      grads_[tensor] = grad;
      return;
    }
    // The sum belongs to the region of the node that wrote the tensor.
    const int p = tensor < static_cast<int>(producer_.size()) ? producer_[tensor] : -1;
    const auto saved_region = region_;
    region_ = p >= 0 ? g_.node(p).attrs.value("region", nlohmann::json()) : nlohmann::json();
    it->second = emit1(OpKind::add, g_.tensor(tensor).name + ".grad_sum", {it->second, grad});
    region_ = saved_region;
  }

  // A forward activation that a backward node reads. Outputs of the nodes whose op table row
  // says `recomputed` are recomputed in the backward instead of being kept from the forward
  // pass, so the forward copy dies early: GELU and dropout (two activations of the FFN width per
  // layer, the dropped attention probabilities), layernorm (two hidden-width activations per
  // layer; its gradient reads its input, which is kept), and the attention chain scores ->
  // softmax -> dropout -> context (the probabilities and the context), whose two small GEMMs
  // (2 B nh S^2 d FLOPs each) are redone once per layer. A recomputation's inputs are
  // themselves recomputed when their producers are, so the chain needs only qkv and the mask
  // bias. Each forward tensor is recomputed at most once, where the backward first reads it.
  // Every backward read of a forward activation goes through here (test "Training graph:
  // outputs of recomputed kinds are read in the backward only as recomputations").
  int saved(int tensor) {
    const int p = tensor < static_cast<int>(producer_.size()) ? producer_[tensor] : -1;
    if (p < 0 || !recomputed_in_backward(g_.node(p))) return tensor;
    auto it = recomputed_.find(tensor);
    if (it != recomputed_.end()) return it->second;
    const Node fwd = g_.node(p);
    std::vector<int> inputs;
    for (int t : fwd.inputs) inputs.push_back(saved(t));
    const auto outer = region_;  // the recomputation belongs to the forward node's region
    region_ = nlohmann::json();
    nlohmann::json attrs = fwd.attrs;
    attrs[kRecomputedAttr] = true;  // extra work, not model FLOPs (docs/graph-format.md)
    const int out = recomputed_[tensor] = emit1(fwd.kind, fwd.name + ".recompute", inputs, attrs);
    region_ = outer;
    return out;
  }

  int grad_of(int tensor) const {
    auto it = grads_.find(tensor);
    return it == grads_.end() ? -1 : it->second;
  }

  void seed_loss(const Node& n) {
    check(n.kind == OpKind::cross_entropy, "loss node '{}' is a {}, not a cross_entropy", n.name,
          to_string(n.kind));
    // Which denominator scales it: mlm (masked tokens), nsp or classifier (labelled sequences
    // or tokens: StepContext::nsp_denominator).
    const auto loss = n.attrs.find("loss");
    check(loss != n.attrs.end() && (*loss == "mlm" || *loss == "nsp" || *loss == "classifier"),
          "loss node '{}' needs attribute 'loss': \"mlm\", \"nsp\" or \"classifier\"", n.name);
    int dlogits = emit1(OpKind::cross_entropy_grad, n.name + ".grad", {n.inputs[0], n.inputs[1]},
                        {{"loss", *loss}});
    contribute(n.inputs[0], dlogits);
  }

  void backward(const Node& n) {
    const int dy = grad_of(n.outputs[0]);
    if (dy < 0) return;  // nothing downstream needs this node
    const auto& in = n.inputs;
    const std::string& name = n.name;
    switch (n.kind) {
      case OpKind::linear: {
        check(activation_of(n) == ops::Activation::none,
              "node '{}': a linear with a fused activation has no backward rule; differentiate "
              "before fusing", name);
        contribute(in[0], emit1(OpKind::linear_grad_input, name + ".grad_input", {dy, in[1]}));
        emit(OpKind::linear_grad_weight, name + ".grad_weight", {dy, saved(in[0])},
             {param_grad(in[1]), param_grad(in[2])});
        if (in.size() > 3) contribute(in[3], dy);  // fused residual
        return;
      }
      case OpKind::add:
        contribute(in[0], dy);
        contribute(in[1], dy);
        return;
      case OpKind::scale:
        contribute(in[0], emit1(OpKind::scale, name + ".grad", {dy}, n.attrs));
        return;
      case OpKind::layernorm: {
        auto outs = emit(OpKind::layernorm_grad, name + ".grad", {dy, saved(in[0]), in[1]},
                         {-1, param_grad(in[1]), param_grad(in[2])}, n.attrs);
        contribute(in[0], outs[0]);
        return;
      }
      case OpKind::activation: {
        // The derivative reads the input x, or the output y (ops/activation.h).
        const bool from_y = ops::activation_info(activation_of(n)).grad_from_output;
        contribute(in[0], emit1(OpKind::activation_grad, name + ".grad", {dy, saved(from_y ? n.outputs[0] : in[0])},
                                {{"activation", n.attrs.at("activation")}}));
        return;
      }
      case OpKind::dropout:
        contribute(in[0], emit1(OpKind::dropout_grad, name + ".grad", {dy}, n.attrs));
        return;
      case OpKind::softmax:
        contribute(in[0], emit1(OpKind::softmax_grad, name + ".grad", {dy, saved(n.outputs[0])}));
        return;
      case OpKind::attn_context: {
        // The V third of dqkv now; attn_scores' backward fills the Q and K thirds.
        int dprobs = emit1(OpKind::attn_context_grad_probs, name + ".grad_probs", {dy, saved(in[1])}, n.attrs);
        pending_qkv_[in[1]] = emit1(OpKind::attn_context_grad_v, name + ".grad_v", {dy, saved(in[0])}, n.attrs);
        contribute(in[0], dprobs);
        return;
      }
      case OpKind::attn_scores: {
        auto it = pending_qkv_.find(in[0]);
        check(it != pending_qkv_.end(), "node '{}': its qkv feeds no attn_context", name);
        const int dqkv = it->second;
        emit(OpKind::attn_scores_grad_q, name + ".grad_q", {dy, saved(in[0])}, {dqkv}, n.attrs);
        emit(OpKind::attn_scores_grad_k, name + ".grad_k", {dy, saved(in[0])}, {dqkv}, n.attrs);
        contribute(in[0], dqkv);
        return;
      }
      case OpKind::first_token: {
        int64_t seq = g_.tensor(in[0]).shape[1];
        contribute(in[0], emit1(OpKind::first_token_grad, name + ".grad", {dy}, {{"seq", seq}}));
        return;
      }
      case OpKind::gather_rows: {
        int64_t seq = g_.tensor(in[0]).shape[1];
        contribute(in[0], emit1(OpKind::gather_rows_grad, name + ".grad", {dy, in[1]}, {{"seq", seq}}));
        return;
      }
      case OpKind::embedding:
        emit(OpKind::embedding_grad, name + ".grad", {dy, in[0], in[1]},
             {param_grad(in[2]), param_grad(in[3]), param_grad(in[4])},
             {{"vocab", g_.tensor(in[2]).shape[0]},
              {"positions", g_.tensor(in[3]).shape[0]},
              {"types", g_.tensor(in[4]).shape[0]}});
        return;
      case OpKind::mask_bias:
        return;  // depends on inputs only
      case OpKind::cross_entropy:  // a loss: seeded by seed_loss, not differentiated here
      case OpKind::cross_entropy_grad:
      case OpKind::linear_grad_input:
      case OpKind::linear_grad_weight:
      case OpKind::attn_scores_grad_q:
      case OpKind::attn_scores_grad_k:
      case OpKind::attn_context_grad_probs:
      case OpKind::attn_context_grad_v:
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
        break;
    }
    fail("node '{}': op kind {} has no backward rule", name, to_string(n.kind));
  }

  Graph& g_;
  std::map<int, int> grads_;        // activation -> its gradient
  std::map<int, int> param_grads_;  // weight -> its gradient tensor
  std::map<int, int> pending_qkv_;  // qkv -> the dqkv whose V third is written
  std::vector<int> producer_;       // forward tensor -> the node writing it
  std::map<int, int> recomputed_;   // forward tensor -> its recomputation in the backward
  std::set<int> wanted_;            // inputs and weights whose activation gradient is asked for
  nlohmann::json region_;           // "region" of the forward node being differentiated (or null)
};

}  // namespace

void append_backward(Graph& g, const std::vector<std::string>& loss_nodes) {
  Differentiator(g).run(loss_nodes);
}

std::vector<int> append_backward_for(Graph& g, const std::vector<std::string>& loss_nodes,
                                     const std::vector<std::pair<int, int>>& seeds,
                                     const std::vector<int>& wrt) {
  return Differentiator(g).run(loss_nodes, seeds, wrt);
}

void append_allreduce(Graph& g, int64_t world_size, const RunSpec::Allreduce& how) {
  check(how.bucket_bytes > 0, "allreduce buckets must hold at least one byte, got {}", how.bucket_bytes);
  check(world_size >= 2, "an allreduce needs at least 2 ranks, got {}", world_size);
  std::vector<int> grads;
  for (const auto& t : g.tensors())
    if (t.role == Role::gradient) grads.push_back(t.id);
  check(!grads.empty(), "the graph has no parameter gradients to allreduce");
  Node n;
  n.name = "communication.allreduce_grads";
  n.kind = OpKind::allreduce;
  n.inputs = grads;
  n.outputs = grads;  // summed in place
  n.attrs = {{"world_size", world_size},
             {"bucket_bytes", how.bucket_bytes},
             {"overlap", how.overlap},
             {"precision", to_string(how.wire)}};
  n.phase = Phase::communication;
  g.append_node(std::move(n));
}

void append_optimizer(Graph& g, const std::string& optimizer) {
  check(optimizer == "adamw" || optimizer == "lamb", "unknown optimizer '{}' (expected adamw or lamb)",
        optimizer);
  std::vector<int> grads;
  for (const auto& t : g.tensors())
    if (t.role == Role::gradient) grads.push_back(t.id);
  check(!grads.empty(), "the graph has no parameter gradients to optimise");
  int norm = g.node(g.add_node(OpKind::grad_norm, "optimizer.grad_norm", grads, {}, Phase::optimizer))
                 .outputs[0];
  const OpKind kind = optimizer == "adamw" ? OpKind::adamw_update : OpKind::lamb_update;
  for (int grad : grads) {
    const std::string param = param_of(g.tensor(grad).name);
    const int p = g.tensor_id(param);
    const Shape shape = g.tensor(p).shape;
    int m = g.add_tensor(exp_avg_name(param), shape, DType::f32, Role::optimizer_state);
    int v = g.add_tensor(exp_avg_sq_name(param), shape, DType::f32, Role::optimizer_state);
    Node n;
    n.name = "optimizer." + param;
    n.kind = kind;
    n.inputs = {p, grad, m, v, norm};
    n.outputs = {p, m, v};
    // The builder's facts about the parameter: weight decay (off for biases and layernorm
    // parameters), LAMB's trust ratios (per Hugging Face tensor: the fused QKV counts as three)
    // and the region its update is counted in.
    const auto& attrs = g.tensor(p).attrs;
    n.attrs = {{"decay", attrs.value("decay", true)}, {"segments", attrs.value("segments", 1)}};
    if (attrs.contains("region")) n.attrs["region"] = attrs.at("region");
    n.phase = Phase::optimizer;
    g.append_node(std::move(n));
  }
}

}  // namespace bertlab

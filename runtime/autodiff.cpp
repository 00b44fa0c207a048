#include "runtime/autodiff.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/op_rules.h"

namespace bertlab {

std::string grad_name(const std::string& p) { return "grad:" + p; }
std::string exp_avg_name(const std::string& p) { return "exp_avg:" + p; }
std::string exp_avg_sq_name(const std::string& p) { return "exp_avg_sq:" + p; }
std::string param_of(const std::string& t) {
  auto colon = t.find(':');
  return colon == std::string::npos ? t : t.substr(colon + 1);
}

std::vector<int> Differentiator::run(const std::vector<std::string>& loss_nodes,
                                     const std::vector<std::pair<int, int>>& seeds, const std::vector<int>& wrt) {
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

std::vector<int> Differentiator::emit(OpKind kind, const std::string& name, std::vector<int> inputs,
                                      std::vector<int> outputs, nlohmann::json attrs, Phase phase) {
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

int Differentiator::emit1(OpKind kind, const std::string& name, std::vector<int> inputs, nlohmann::json attrs) {
  return emit(kind, name, std::move(inputs), {}, std::move(attrs))[0];
}

int Differentiator::param_grad(int weight) {
  auto it = param_grads_.find(weight);
  if (it != param_grads_.end()) return it->second;
  const auto& w = g_.tensor(weight);
  check(w.role == Role::weight, "tensor '{}' is not a parameter", w.name);
  int id = g_.add_tensor(grad_name(w.name), w.shape, DType::f32, Role::gradient);
  param_grads_[weight] = id;
  return id;
}

void Differentiator::contribute(int tensor, int grad) {
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

// Outputs of the nodes whose op table row says `recomputed` are recomputed in the backward
// instead of being kept from the forward pass, so the forward copy dies early: GELU and dropout
// (two activations of the FFN width per layer, the dropped attention probabilities), layernorm
// (two hidden-width activations per layer; its gradient reads its input, which is kept), and the
// attention chain scores -> softmax -> dropout -> context (the probabilities and the context),
// whose two small GEMMs (2 B nh S^2 d FLOPs each) are redone once per layer. A recomputation's
// inputs are themselves recomputed when their producers are, so the chain needs only qkv and the
// mask bias. Each forward tensor is recomputed at most once, where the backward first reads it.
// Every backward read of a forward activation goes through here (test "Training graph: outputs
// of recomputed kinds are read in the backward only as recomputations").
int Differentiator::saved(int tensor) {
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

int Differentiator::held_dqkv(int qkv) const {
  auto it = pending_qkv_.find(qkv);
  return it == pending_qkv_.end() ? -1 : it->second;
}

int Differentiator::grad_of(int tensor) const {
  auto it = grads_.find(tensor);
  return it == grads_.end() ? -1 : it->second;
}

void Differentiator::seed_loss(const Node& n) {
  check(n.kind == OpKind::cross_entropy, "loss node '{}' is a {}, not a cross_entropy", n.name,
        to_string(n.kind));
  // Which denominator scales it: mlm (masked tokens), nsp or classifier (labelled sequences
  // or tokens: StepContext::nsp_denominator).
  const LossKind loss = loss_kind_of(n);
  int dlogits = emit1(OpKind::cross_entropy_grad, n.name + ".grad", {n.inputs[0], n.inputs[1]},
                      {{"loss", to_string(loss)}});
  contribute(n.inputs[0], dlogits);
}

// The kind's backward rule (runtime/rules/), when something downstream needs this node.
void Differentiator::backward(const Node& n) {
  const int dy = grad_of(n.outputs[0]);
  if (dy < 0) return;
  const auto rule = op_rules(n.kind).backward;
  check(rule != nullptr, "node '{}': op kind {} has no backward rule", n.name, to_string(n.kind));
  rule(*this, n, dy);
}

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

void append_optimizer(Graph& g, OptimizerKind optimizer) {
  std::vector<int> grads;
  for (const auto& t : g.tensors())
    if (t.role == Role::gradient) grads.push_back(t.id);
  check(!grads.empty(), "the graph has no parameter gradients to optimise");
  int norm = g.node(g.add_node(OpKind::grad_norm, "optimizer.grad_norm", grads, {}, Phase::optimizer))
                 .outputs[0];
  const OpKind kind = optimizer == OptimizerKind::adamw ? OpKind::adamw_update : OpKind::lamb_update;
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

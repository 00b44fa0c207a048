#include "runtime/fusion.h"

#include <algorithm>

#include "base/error.h"
#include "runtime/op_rules.h"

namespace bertlab {

TensorUses::TensorUses(const Graph& g) : readers(g.tensors().size()), is_output(g.tensors().size()) {
  for (const auto& n : g.nodes())
    for (int t : n.inputs) readers[t].push_back(n.id);
  for (const auto& [name, t] : g.outputs()) is_output[t] = true;
}

namespace {

bool plain_linear(const Node& n) {
  return n.kind == OpKind::linear && n.inputs.size() == 3 &&
         activation_of(n) == ops::Activation::none;
}

int fuse_linear_activation(Graph& g) {
  TensorUses uses(g);
  std::vector<bool> dead(g.nodes().size(), false);
  int rewrites = 0;
  for (const auto& cn : g.nodes()) {
    if (!plain_linear(cn)) continue;
    int r = uses.sole_reader(cn.outputs[0]);
    if (r < 0) continue;
    const Node& act = g.node(r);
    if (op_info(act.kind).fusion != Fusion::linear_activation) continue;
    Node& lin = g.node(cn.id);
    lin.attrs["activation"] = ops::to_string(activation_of(act));
    lin.outputs = act.outputs;
    dead[r] = true;
    ++rewrites;
  }
  g.compact(dead);
  return rewrites;
}

int fuse_linear_residual(Graph& g) {
  TensorUses uses(g);
  std::vector<bool> dead(g.nodes().size(), false);
  int rewrites = 0;
  for (const auto& cn : g.nodes()) {
    if (!plain_linear(cn)) continue;
    int r = uses.sole_reader(cn.outputs[0]);
    if (r < 0 || op_info(g.node(r).kind).fusion != Fusion::linear_residual) continue;
    const Node& add = g.node(r);
    int residual = add.inputs[0] == cn.outputs[0] ? add.inputs[1] : add.inputs[0];
    if (residual == cn.outputs[0]) continue;  // x + x is not a residual
    Node& lin = g.node(cn.id);
    lin.inputs.push_back(residual);
    lin.outputs = add.outputs;
    dead[r] = true;
    ++rewrites;
  }
  g.compact(dead);
  return rewrites;
}

using Pass = int (*)(Graph&);
const std::vector<std::pair<std::string, Pass>>& passes() {
  static const std::vector<std::pair<std::string, Pass>> list{
      {"linear_activation", fuse_linear_activation},
      {"linear_residual", fuse_linear_residual},
  };
  return list;
}

}  // namespace

const std::vector<std::string>& fusion_pass_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : passes()) v.push_back(p.first);
    return v;
  }();
  return names;
}

std::vector<std::string> apply_fusions(Graph& g, const std::set<std::string>& disabled) {
  for (const auto& d : disabled)
    check(std::find(fusion_pass_names().begin(), fusion_pass_names().end(), d) !=
              fusion_pass_names().end(),
          "unknown fusion pass '{}' (known: {})", d, fmt::join(fusion_pass_names(), ", "));
  std::vector<std::string> applied;
  for (const auto& [name, pass] : passes())
    if (!disabled.count(name)) applied.push_back(fmt::format("{}:{}", name, pass(g)));
  return applied;
}

}  // namespace bertlab

// The generic side of the op rules: Graph's shape inference, node_flops, node_min_bytes and
// node_gemm call through each kind's rules (runtime/rules/<family>.cpp); the GEMM precision
// attribute, the activation attribute and the recomputation rule. Conventions are documented
// in docs/graph-format.md.
#include "runtime/op_rules.h"

#include "base/error.h"

namespace bertlab {

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

LossKind loss_kind_of(const Node& n) {
  const auto it = n.attrs.find("loss");
  const auto kind = it != n.attrs.end() && it->is_string() ? enum_parse<LossKind>(it->get<std::string>()) : std::nullopt;
  check(kind.has_value(), "loss node '{}' needs attribute 'loss': \"mlm\", \"nsp\" or \"classifier\"", n.name);
  return *kind;
}

OutputTypes infer_outputs(const Graph& g, const Node& n) { return op_rules(n.kind).infer(g, n); }

Precision gemm_precision(const Node& n) {
  auto it = n.attrs.find("precision");
  if (it == n.attrs.end()) return Precision::fp32;
  const auto precision = it->is_string() ? enum_parse<Precision>(it->get<std::string>()) : std::nullopt;
  check(precision.has_value(), "node '{}': attribute 'precision' must be \"fp32\" or \"bf16\", got {}", n.name,
        it->dump());
  return *precision;
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
  const auto gemm = op_rules(n.kind).gemm;
  if (gemm == nullptr) return std::nullopt;
  return gemm(g, n);
}

double node_flops(const Graph& g, const Node& n) { return op_rules(n.kind).flops(g, n); }

int64_t node_min_bytes(const Graph& g, const Node& n) { return op_rules(n.kind).min_bytes(g, n); }

}  // namespace bertlab

#pragma once
// The code rules of an op kind, one OpRules per kind, defined per family beside its siblings in
// runtime/rules/<family>.cpp and named by the kind's row in runtime/op_table.h (kOpRules). The
// generic code calls through them: Graph (infer), node_flops, node_min_bytes and node_gemm
// (graph.h), autodiff (backward) and the executor (kernel). Also the per-node helpers those rules
// share: the activation attribute, the recomputation rule.
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "ops/activation.h"
#include "runtime/graph.h"

namespace bertlab {

class Differentiator;  // runtime/differentiator.h
class StepBinder;      // runtime/step_binder.h

using OutputTypes = std::vector<std::pair<Shape, DType>>;

struct OpRules {
  // Shapes and dtypes of the node's outputs, validating its inputs; throws Error naming the node.
  OutputTypes (*infer)(const Graph& g, const Node& n);
  // FLOPs and minimal bytes (node_flops, node_min_bytes; docs/graph-format.md lists them).
  double (*flops)(const Graph& g, const Node& n);
  int64_t (*min_bytes)(const Graph& g, const Node& n);
  // The GEMM of a gemm-category kind (node_gemm); nullptr for the others.
  GemmShape (*gemm)(const Graph& g, const Node& n);
  // Emits the nodes of the backward of n, given dy, the gradient of its output 0; nullptr for
  // the kinds that are not differentiated (the backward, optimizer and communication kinds, and
  // cross_entropy, which autodiff seeds as a loss).
  void (*backward)(Differentiator& d, const Node& n, int dy);
  // The node's kernel, bound once to its buffers (Executor).
  std::function<void()> (*kernel)(StepBinder& b, const Node& n);
};

inline const OpRules& op_rules(OpKind k) { return *kOpRules[static_cast<size_t>(k)]; }

// The activation of a node: its "activation" attribute (none when a linear has none); throws
// Error naming the node on an unknown name, or when an activation node lacks it.
ops::Activation activation_of(const Node& n);
// Which loss a cross_entropy node computes, its attribute "loss" (passed on to its
// cross_entropy_grad), and so its denominator: mlm, the masked tokens (StepContext's
// mlm_denominator); nsp and classifier, the labelled sequences or tokens (nsp_denominator). The
// names are the graph file's.
#define BERTLAB_LOSS_KINDS(X) X(mlm, "mlm") X(nsp, "nsp") X(classifier, "classifier")
BERTLAB_ENUM(LossKind, uint8_t, BERTLAB_LOSS_KINDS)
// A node's "loss" attribute; throws Error naming the node when it has none or it names no loss.
LossKind loss_kind_of(const Node& n);
// Whether a backward pass recomputes this forward node's output rather than keeping it: the op
// table's `saved` column, and for activations the activation's row (ops/activation.h, keep).
bool recomputed_in_backward(const Node& n);
// Shapes and dtypes of a node's outputs, validating its inputs; throws Error naming the node.
OutputTypes infer_outputs(const Graph& g, const Node& n);

}  // namespace bertlab

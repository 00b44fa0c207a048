#pragma once
// Per-op-kind rules used by Graph: the activation attribute and shape inference. (FLOPs, bytes and the GEMM of
// a node are public in graph.h.)
#include <utility>
#include <vector>

#include "ops/activation.h"
#include "runtime/graph.h"

namespace bertlab {

// The activation of a node: its "activation" attribute (none when a linear has none); throws
// Error naming the node on an unknown name, or when an activation node lacks it.
ops::Activation activation_of(const Node& n);
// Whether a backward pass recomputes this forward node's output rather than keeping it: the op
// table's `saved` column, and for activations the activation's row (ops/activation.h, keep).
bool recomputed_in_backward(const Node& n);
// Shapes and dtypes of a node's outputs, validating its inputs; throws Error naming the node.
std::vector<std::pair<Shape, DType>> infer_outputs(const Graph& g, const Node& n);

}  // namespace bertlab

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
// Shapes and dtypes of a node's outputs, validating its inputs; throws Error naming the node.
std::vector<std::pair<Shape, DType>> infer_outputs(const Graph& g, const Node& n);

}  // namespace bertlab

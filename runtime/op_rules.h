#pragma once
// Per-op-kind rules used by Graph: category and shape inference. (FLOPs, bytes and the GEMM of
// a node are public in graph.h.)
#include <utility>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

Category category_of(OpKind k);
// Shapes and dtypes of a node's outputs, validating its inputs; throws Error naming the node.
std::vector<std::pair<Shape, DType>> infer_outputs(const Graph& g, const Node& n);

}  // namespace bertlab

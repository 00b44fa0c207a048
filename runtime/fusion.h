#pragma once
// Fusion passes: named, each can be switched off, each tested fused == unfused.
#include <set>
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

// linear_activation: linear followed by an activation node -> it runs in the GEMM epilogue.
// linear_residual:   linear followed by add of a residual -> the add runs in the GEMM epilogue.
const std::vector<std::string>& fusion_pass_names();

// Applies every pass not in `disabled`, in the order above. Throws on an unknown name.
// Returns the names of the passes applied, with the number of rewrites, e.g. "linear_residual:24".
std::vector<std::string> apply_fusions(Graph& g, const std::set<std::string>& disabled = {});

}  // namespace bertlab

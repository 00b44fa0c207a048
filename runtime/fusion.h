#pragma once
// Fusion passes: named, each can be switched off, each tested fused == unfused.
#include <set>
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

// For each tensor: the nodes that read it, and whether it is a graph output. Fusion passes and
// the executor's own pairings (runtime/step_rules.cpp) find single consumers with it.
struct TensorUses {
  std::vector<std::vector<int>> readers;
  std::vector<bool> is_output;
  explicit TensorUses(const Graph& g);
  // The single node reading t, if t has exactly one reader and is not a graph output.
  int sole_reader(int t) const { return readers[t].size() == 1 && !is_output[t] ? readers[t][0] : -1; }
};

// linear_activation: linear followed by an activation node -> it runs in the GEMM epilogue.
// linear_residual:   linear followed by add of a residual -> the add runs in the GEMM epilogue.
const std::vector<std::string>& fusion_pass_names();

// Applies every pass not in `disabled`, in the order above. Throws on an unknown name.
// Returns the names of the passes applied, with the number of rewrites, e.g. "linear_residual:24".
std::vector<std::string> apply_fusions(Graph& g, const std::set<std::string>& disabled = {});

}  // namespace bertlab

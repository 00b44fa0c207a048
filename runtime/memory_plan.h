#pragma once
// Liveness-based placement of activations (and graph inputs) in one arena: two tensors share
// bytes only when their lifetimes do not overlap.
#include <cstdint>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

struct MemoryPlan {
  std::vector<int64_t> offset;  // bytes, per tensor id; -1 for tensors not in the arena
  int64_t arena_bytes = 0;      // size of the shared arena
  int64_t unshared_bytes = 0;   // what the same tensors would take without reuse
};

// Places every tensor whose role is input or activation. A tensor lives from the node that
// writes it to the last node that reads it; graph inputs and outputs live through the whole run.
// Element-wise kinds whose kernels accept an output that is their first input; the plan puts
// such an output over its input when the input is read by no later node, unless `apart` (per
// tensor, when not empty) marks the output: an output written in another layout than its input
// (a bf16 handoff) must not overwrite it while it is read.
//
// `runs` (per node, when not empty): nodes run as one step, as runtime::fused_steps gives them
// (k >= 2: this node and the k - 1 after it; 0: inside a run). A run's kernel may read any of
// its inputs while it writes any of its outputs, so they are all live through the whole run;
// the tensors that only the run's own nodes write and read never leave the kernel's scratch and
// get no buffer (offset -1).
bool runs_in_place(OpKind k);
MemoryPlan plan_memory(const Graph& g, int64_t alignment = 64, const std::vector<char>& apart = {},
                       const std::vector<uint8_t>& runs = {});

}  // namespace bertlab

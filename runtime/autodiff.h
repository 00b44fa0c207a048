#pragma once
// Reverse-mode differentiation of a forward graph: one backward rule per op kind.
#include <string>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

// Name of the gradient / optimizer-state tensor of a parameter.
std::string grad_name(const std::string& param);          // grad:<param>
std::string exp_avg_name(const std::string& param);       // exp_avg:<param>
std::string exp_avg_sq_name(const std::string& param);    // exp_avg_sq:<param>
std::string param_of(const std::string& state_tensor);    // strips the prefix

// Appends backward nodes for the sum of the given cross-entropy loss nodes. Activation
// gradients are new tensors (summed with add nodes where a tensor has several consumers);
// parameter gradients are tensors of role gradient, accumulated (+=) by every node that
// contributes, so several micro-batches accumulate before one optimizer step.
void append_backward(Graph& g, const std::vector<std::string>& loss_nodes);

// Appends grad_norm over every parameter gradient, then one update node per parameter
// (adamw_update or lamb_update). Weight decay is off for biases and layernorm parameters.
void append_optimizer(Graph& g, const std::string& optimizer);
// Data parallelism: one allreduce node (phase communication) summing every parameter gradient
// over `world_size` ranks; append after the backward and before the optimizer.
void append_allreduce(Graph& g, int64_t world_size);

// True when weight decay applies to a parameter (not a bias, not a LayerNorm parameter).
bool decays(const std::string& param);

}  // namespace bertlab

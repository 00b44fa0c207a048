#pragma once
// Reverse-mode differentiation of a forward graph: one backward rule per op kind.
#include <string>
#include <vector>

#include "runtime/bert_config.h"
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
// The same from given gradients: `seeds` pairs a forward tensor with a tensor holding its
// gradient (same shape), with or without loss nodes. Returns, for each tensor of `wrt` (an
// activation, a graph input or a weight), the tensor of its gradient, or -1 when none flows
// to it. For graphs whose loss is computed elsewhere, and for tests.
std::vector<int> append_backward_for(Graph& g, const std::vector<std::string>& loss_nodes,
                                     const std::vector<std::pair<int, int>>& seeds,
                                     const std::vector<int>& wrt);

// Appends grad_norm over every parameter gradient, then one update node per parameter
// (adamw_update or lamb_update). Weight decay and LAMB segments follow the parameter tensor's
// attributes "decay" (default true) and "segments" (default 1), set by the builder.
void append_optimizer(Graph& g, OptimizerKind optimizer);
// Data parallelism: one allreduce node (phase communication) summing every parameter gradient
// over `world_size` ranks; append after the backward and before the optimizer. Its attributes
// say how it runs: bucket_bytes, overlap, precision (on the wire).
void append_allreduce(Graph& g, int64_t world_size, const RunSpec::Allreduce& how = {});

}  // namespace bertlab

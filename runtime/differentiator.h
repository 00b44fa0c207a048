#pragma once
// Reverse-mode differentiation of a forward graph (runtime/autodiff.h's functions run it): what
// an op's backward rule (OpRules::backward, runtime/rules/) emits its nodes through.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

class Differentiator {
 public:
  explicit Differentiator(Graph& g) : g_(g) {}

  // Differentiates every forward node, last first; returns the gradient tensor of each of `wrt`
  // (-1 when none flows to it). autodiff.h's append_backward_for says what the arguments mean.
  std::vector<int> run(const std::vector<std::string>& loss_nodes,
                       const std::vector<std::pair<int, int>>& seeds = {}, const std::vector<int>& wrt = {});

  const Graph& graph() const { return g_; }
  // Emits a backward node; outputs[i] >= 0 names an existing tensor, -1 asks for a new one.
  std::vector<int> emit(OpKind kind, const std::string& name, std::vector<int> inputs, std::vector<int> outputs,
                        nlohmann::json attrs = nlohmann::json::object(), Phase phase = Phase::backward);
  // Emits a node with one new output; returns it.
  int emit1(OpKind kind, const std::string& name, std::vector<int> inputs,
            nlohmann::json attrs = nlohmann::json::object());
  // The gradient tensor of a parameter (made on first use; every contribution accumulates +=).
  int param_grad(int weight);
  // Adds a gradient contribution to an activation (summing when one already exists).
  void contribute(int tensor, int grad);
  // A forward activation that a backward node reads: itself, or its recomputation in the
  // backward when its producer's output is recomputed (recomputed_in_backward).
  int saved(int tensor);
  // The dqkv of a qkv tensor, made by the attention context's backward (its V third) and
  // completed by the scores' (the Q and K thirds).
  void hold_dqkv(int qkv, int dqkv) { pending_qkv_[qkv] = dqkv; }
  int held_dqkv(int qkv) const;  // -1 when none is held

 private:
  int grad_of(int tensor) const;
  void seed_loss(const Node& n);
  void backward(const Node& n);

  Graph& g_;
  std::map<int, int> grads_;        // activation -> its gradient
  std::map<int, int> param_grads_;  // weight -> its gradient tensor
  std::map<int, int> pending_qkv_;  // qkv -> the dqkv whose V third is written
  std::vector<int> producer_;       // forward tensor -> the node writing it
  std::map<int, int> recomputed_;   // forward tensor -> its recomputation in the backward
  std::set<int> wanted_;            // inputs and weights whose activation gradient is asked for
  nlohmann::json region_;           // "region" of the forward node being differentiated (or null)
};

}  // namespace bertlab

#pragma once
// What an op's kernel binding (OpRules::kernel, runtime/rules/) sees of the Executor while it
// makes the node's step: the node's buffers and shapes, the step context, the executor's
// per-node decisions (runtime/step_rules.h) and the weight copies it accounts for. A step is
// made once; what it captures must stay valid for the executor's life (buffers, the context).
#include <algorithm>
#include <functional>
#include <memory>

#include "runtime/executor.h"
#include "runtime/grad_sync.h"

namespace bertlab {

class StepBinder {
 public:
  explicit StepBinder(Executor& ex) : ex_(ex) {}

  const Graph& graph() const { return ex_.graph_; }
  bool training() const { return ex_.training(); }
  StepContext* context() const { return &ex_.context_; }

  // Input or output i of node n, and the shape of input i.
  float* in(const Node& n, size_t i) const { return ex_.in_of(n, i); }
  float* out(const Node& n, size_t i) const { return ex_.out_of(n, i); }
  const Shape& shape(const Node& n, size_t i) const { return ex_.shape_of(n, i); }
  const int32_t* ids(const Node& n, size_t i) const { return ex_.i32(n.inputs.at(i)); }  // an i32 input
  float* f32(int tensor) const { return ex_.f32(tensor); }
  int64_t out_numel(const Node& n) const { return ex_.graph_.tensor(n.outputs.at(0)).numel(); }

  // The executor's decisions per tensor or node (runtime/step_rules.h).
  bool handed_off(int tensor) const { return ex_.handoff_.at(static_cast<size_t>(tensor)) != 0; }  // bf16_handoffs
  bool shares_dy(const Node& n) const { return ex_.share_dy_.at(static_cast<size_t>(n.id)) != 0; }  // shared_dy_casts
  uint8_t shared_attention(const Node& n) const { return ex_.shared_attn_.at(static_cast<size_t>(n.id)); }
  const KeptXCast& kept_x(const Node& n) const { return ex_.kept_x_.at(static_cast<size_t>(n.id)); }  // kept_x_casts
  // The bf16 copy of x a linear layer keeps for its dW GEMM (by the linear's node id): made by the
  // linear, read by its dW GEMM.
  AlignedBuffer<std::byte>& keep_x_copy(int linear) { return ex_.kept_x_copies_[linear]; }
  const AlignedBuffer<std::byte>& kept_x_copy(int linear) const { return ex_.kept_x_copies_.at(linear); }

  // Weight copies: the packed weights of inference (remade by Executor::repack_weights), the one
  // shared packing scratch of training (its largest user's bytes), the copies kept per GEMM.
  void add_repacker(std::function<void()> repack) { ex_.repackers_.push_back(std::move(repack)); }
  void add_packed_weight_bytes(int64_t bytes) { ex_.packed_weight_bytes_ += bytes; }
  void need_packed_weight_bytes(int64_t bytes) { ex_.packed_weight_bytes_ = std::max(ex_.packed_weight_bytes_, bytes); }
  int64_t* kept_weight_bytes() { return &ex_.kept_weight_bytes_; }

  // Data parallelism: the training state's gradients, and the gradient sync the allreduce node
  // makes (steps made before it read it through the pointer when they run).
  TrainingState& state() const { return *ex_.state_; }
  const std::unique_ptr<GradientSync>* sync() const { return &ex_.sync_; }
  GradientSync* start_sync(std::unique_ptr<GradientSync> sync) {
    ex_.sync_ = std::move(sync);
    return ex_.sync_.get();
  }

 private:
  Executor& ex_;
};

}  // namespace bertlab

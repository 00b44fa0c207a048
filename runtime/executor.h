#pragma once
// Runs a graph: every kernel (oneDNN primitive, packed weights) is made once at construction;
// run() only executes them, in graph order, on buffers planned once. Training graphs also need
// a TrainingState (gradients and optimizer moments, flat arenas laid out like the parameters)
// and a StepContext (step counters, loss denominators, optimizer hyper-parameters).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/buffer.h"
#include "ops/optimizer.h"
#include "runtime/graph.h"
#include "runtime/memory_plan.h"
#include "runtime/params.h"
#include "runtime/step_rules.h"

namespace bertlab {

// Gradients and AdamW/LAMB moments: one flat arena each, with the parameters' layout, so the
// optimizer, the checkpoint and an allreduce each touch one buffer.
struct TrainingState {
  ParamStore grads, exp_avg, exp_avg_sq;
  explicit TrainingState(const ParamStore& params)
      : grads(ParamStore::like(params)), exp_avg(ParamStore::like(params)),
        exp_avg_sq(ParamStore::like(params)) {}
};

// What changes between runs of a training graph.
struct StepContext {
  uint64_t seed = 0;          // dropout stream
  int64_t step = 1;           // optimizer step, 1-based (bias corrections, dropout stream)
  int64_t micro = 0;          // micro-batch within the step (dropout stream)
  float mlm_denominator = 1;  // masked tokens in the whole (accumulated) batch
  float nsp_denominator = 1;  // sequences (nsp) or labelled examples (classifier) in the whole batch
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  float max_grad_norm = 1.0f;  // <= 0: no clipping
  double grad_norm = 0;        // written by the grad_norm node
  bool sync_gradients = true;  // data parallel: this micro-batch is the step's last, so its
                               // backward starts the gradient allreduce buckets
  // Gradient accumulation: the parameters do not change while this number stays the same, so
  // each GEMM keeps its packed (and, in bf16, cast) weights from the first micro-batch of an
  // optimizer step for the others. 0: unknown, re-read the weights on every run into one
  // shared scratch (no memory per weight). Callers change it whenever the parameters may have.
  uint64_t weights_version = 0;
};

// The step's optimizer hyper-parameters, with global-norm clipping as
// torch.nn.utils.clip_grad_norm_ (the gradient scaled by max_norm / (norm + 1e-6) when below 1).
ops::AdamHyper optimizer_hyper(const StepContext& ctx);

// A fresh StepContext::weights_version, unique in the process (never 0).
uint64_t next_weights_version();

enum PhaseMask : unsigned {
  kForward = 1u << 0,
  kBackward = 1u << 1,
  kOptimizer = 1u << 2,
  kCommunication = 1u << 3,
  kAllPhases = kForward | kBackward | kOptimizer | kCommunication,
};

class GradientSync;

class Executor {
 public:
  // `params` (and `state`) must outlive the executor. Inference graphs pack their weights once
  // (and again on repack_weights()); training graphs pack each weight just before its GEMM into
  // one shared scratch buffer, since the weights change every step, or, with a nonzero
  // StepContext::weights_version, into a copy per GEMM kept until that version changes.
  Executor(Graph graph, ParamStore& params, TrainingState* state = nullptr);
  // Inference only: the parameters are read, never written.
  Executor(Graph graph, const ParamStore& params)
      : Executor(std::move(graph), const_cast<ParamStore&>(params), nullptr) {}
  ~Executor();

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  int64_t packed_weight_bytes() const { return packed_weight_bytes_; }
  // Bytes of the weight copies kept across micro-batches (StepContext::weights_version), made
  // on the first run that asks for them.
  int64_t kept_weight_bytes() const { return kept_weight_bytes_; }
  // bf16 training: bytes of the bf16 copies of x kept from the forward pass for the dW GEMMs
  // (kept_x_casts).
  int64_t kept_x_bytes() const;
  StepContext& context() { return context_; }
  bool training() const { return state_ != nullptr; }

  // Graph input buffer (input_ids, token_type_ids, attention_mask, ...), int32, in the arena.
  int32_t* input(const std::string& name);
  // Graph output by public name (last_hidden_state, mlm_loss, ...), valid until the next run().
  const float* output(const std::string& name) const;
  Shape output_shape(const std::string& name) const;

  // Executes the nodes of the selected phases once, in order. With `node_seconds`, times each
  // node (resized to nodes().size(); nodes not run get 0).
  void run(std::vector<double>* node_seconds = nullptr, unsigned phases = kAllPhases);
  // Re-reads the weights from the parameter store (inference graphs, after they changed).
  void repack_weights();

 private:
  void* buffer(int tensor_id) const;
  float* f32(int tensor_id) const { return static_cast<float*>(buffer(tensor_id)); }
  const int32_t* i32(int tensor_id) const { return static_cast<const int32_t*>(buffer(tensor_id)); }
  // Input or output i of node n, as a step binds it.
  float* in_of(const Node& n, size_t i) const { return f32(n.inputs.at(i)); }
  float* out_of(const Node& n, size_t i) const { return f32(n.outputs.at(i)); }
  const Shape& shape_of(const Node& n, size_t i) const { return graph_.tensor(n.inputs.at(i)).shape; }
  friend class StepBinder;  // the kernel bindings of the op kinds (runtime/step_binder.h)
  std::function<void()> make_step(const Node& n);          // runtime/executor_steps.cpp
  void fuse_optimizer_steps();                             // runtime/executor_steps.cpp
  void fuse_pairs();                                       // runtime/executor_steps.cpp (fused_steps' pairs)
  std::function<void()> attention_step(const Node& scores, const Node& context);
  std::function<void()> dropout_add_step(const Node& drop, const Node& add);
  std::function<void()> dropout_softmax_grad_step(const Node& drop, const Node& soft);

  Graph graph_;
  ParamStore& params_;
  TrainingState* state_;
  std::vector<uint8_t> runs_;  // per node: the nodes its step runs (fused_steps)
  MemoryPlan plan_;
  AlignedBuffer<std::byte> arena_;
  StepContext context_;
  std::vector<std::function<void()>> steps_;
  std::vector<std::function<void()>> repackers_;
  std::vector<char> share_dy_;  // per node: a bf16 dX/dW pair sharing the cast of dy (shared_dy_casts)
  std::vector<uint8_t> shared_attn_;  // per node: attention GEMM inputs read from an earlier cast
  std::vector<char> handoff_;   // per tensor, inference: bf16 between two linear layers (bf16_linear_handoffs)
  std::vector<KeptXCast> kept_x_;  // per node, bf16 training (kept_x_casts)
  std::map<int, AlignedBuffer<std::byte>> kept_x_copies_;  // by linear node: its bf16 x, kept for its dW
  std::unique_ptr<GradientSync> sync_;  // data parallel: the gradient buckets (runtime/grad_sync.h)
  int64_t packed_weight_bytes_ = 0;
  int64_t kept_weight_bytes_ = 0;
};

}  // namespace bertlab

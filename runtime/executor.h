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
#include "runtime/graph.h"
#include "runtime/memory_plan.h"
#include "runtime/params.h"

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

// bf16 training: per node, 1 for the dX and dW GEMMs of a linear layer that share one bf16 cast
// of dy (ops::kSharedDySlot): the dW GEMM runs after the dX GEMM on the same dy, with no other
// bf16 dX GEMM between them. runtime/executor_steps.cpp.
std::vector<char> shared_dy_casts(const Graph& g);

// bf16 training: per node, the inputs of an attention backward GEMM (bit i: input i) whose bf16
// copy is still in its scratch slot, made by an earlier GEMM on the same values, so the node
// reads it instead of casting again (ops::AttentionGrad's `reuse`): dctx of context_grad_v (cast
// by the context_grad_probs right before it), dS of scores_grad_k (by the scores_grad_q right
// before it), and K of scores_grad_q and Q of scores_grad_k (by the latest attn_scores on the
// same qkv, in the backward its recomputation). runtime/executor_steps.cpp.
std::vector<uint8_t> shared_attention_casts(const Graph& g);

// bf16 inference: per tensor, 1 for the output of a bf16 linear layer (without a residual) or
// of a bf16 attention context product whose only reader is the input x of another bf16 linear
// layer, and not a graph output: the producer writes it as bf16 and the consumer reads it
// without a cast (ops::LinearBf16Io), e.g. the GELU output between the two FFN GEMMs, and the
// attention context before attention.output. Also the output of a bf16 linear layer read only
// as qkv by bf16 attention score and context products (the fused qkv), which copy their
// head-major Q, K and V from it rather than cast them. runtime/executor_steps.cpp.
std::vector<char> bf16_linear_handoffs(const Graph& g);

// bf16, training and inference: per tensor, 1 for the output of a dropout read only as the
// probabilities P by bf16 attention products (context P V, and dV = P^T dctx on the backward's
// recomputation): the dropout writes it as bf16 (ops::dropout_forward_bf16) and the products
// read it in place instead of casting it. runtime/executor_steps.cpp.
std::vector<char> bf16_probs_handoffs(const Graph& g);

// Training: a linear weight larger than this (the tied MLM decoder) is read unpacked by its
// GEMMs rather than doubled in memory by a packed copy.
inline constexpr int64_t kLargeWeightBytes = 32 << 20;

// Training: whether GEMM node `n` reorders its B operand into the layout oneDNN picks before the
// matmul (a packed copy; ops::GemmInput). linear: the weight, unless larger than
// kLargeWeightBytes. f32 linear_grad_input (B = w) and linear_grad_weight (B = x): the same
// rule, because oneDNN's f32 brgemm reads a plain B at half speed on some shapes. bf16 backward
// GEMMs cast B into a dense copy instead (a bf16 packing reorder costs more than it saves).
// Attention GEMMs: never. runtime/executor_steps.cpp; hwmodel's CPU model charges the reorder.
bool gemm_b_packed(const Graph& g, const Node& n);

// bf16 training: a forward linear layer whose input x the backward recomputes for the layer's
// dW GEMM (a layernorm output, the GELU output, the attention context) keeps its bf16 copy of x
// for that GEMM, which would make the same copy of the same values; the recomputation, read by
// nothing else, does not run. Per node, its part and the linear layer that keeps the copy
// (none in inference and fp32 graphs). runtime/executor_steps.cpp.
enum class KeptX : uint8_t {
  none,
  keeps,    // the forward linear layer: casts x into a buffer kept until the backward
  reads,    // its dW GEMM: reads that buffer instead of casting x
  skipped,  // the recomputation of x the dW GEMM would have read: not run
};
struct KeptXCast {
  KeptX role = KeptX::none;
  int linear = -1;  // the node of the linear layer that keeps the copy
};
std::vector<KeptXCast> kept_x_casts(const Graph& g);

// Per node: 1 when the executor runs the next node's work in this node's step, as one pass
// bit-identical to the two kernels, and leaves the next node's step empty (a profile books the
// pair's time on this node; hwmodel's CPU model prices it so). Two pairs, each where this node's
// output is read only by the next node: a dropout and the residual add it feeds
// (ops::dropout_add_forward); a dropout_grad and the softmax_grad whose dy it is
// (ops::dropout_softmax_backward). The executor keeps the two kernels when the buffers overlap
// other than element for element. runtime/executor_steps.cpp.
std::vector<char> fused_pairs(const Graph& g);

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
  std::function<void()> make_step(const Node& n);          // runtime/executor_steps.cpp
  std::function<void()> make_linear_step(const Node& n);   // runtime/executor_steps.cpp
  void fuse_optimizer_steps();                             // runtime/executor_steps.cpp
  void fuse_pairs();                                       // runtime/executor_steps.cpp (fused_pairs)
  std::function<void()> dropout_add_step(const Node& drop, const Node& add);
  std::function<void()> dropout_softmax_grad_step(const Node& drop, const Node& soft);

  Graph graph_;
  ParamStore& params_;
  TrainingState* state_;
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

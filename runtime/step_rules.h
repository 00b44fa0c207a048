#pragma once
// How the executor runs a graph, decided from the graph alone: which GEMMs pack B, which bf16
// casts are shared or kept, which tensors are handed over in bf16, which node pairs run as one
// pass. The executor (runtime/executor.*) follows these rules, and hwmodel's calibrated CPU
// model prices the same graph by them.
#include <cstdint>
#include <vector>

#include "runtime/graph.h"

namespace bertlab {

// bf16 training: per node, 1 for the dX and dW GEMMs of a linear layer that share one bf16 cast
// of dy (ops::kSharedDySlot): the dW GEMM runs after the dX GEMM on the same dy, with no other
// bf16 dX GEMM between them. runtime/step_rules.cpp.
std::vector<char> shared_dy_casts(const Graph& g);

// bf16 training: per node, the inputs of an attention backward GEMM (bit i: input i) whose bf16
// copy is still in its scratch slot, made by an earlier GEMM on the same values, so the node
// reads it instead of casting again (ops::AttentionGrad's `reuse`): dctx of context_grad_v (cast
// by the context_grad_probs right before it), dS of scores_grad_k (by the scores_grad_q right
// before it), and K of scores_grad_q and Q of scores_grad_k (by the latest attn_scores on the
// same qkv, in the backward its recomputation). runtime/step_rules.cpp.
std::vector<uint8_t> shared_attention_casts(const Graph& g);

// bf16 inference: per tensor, 1 for the output of a bf16 linear layer (without a residual) or
// of a bf16 attention context product whose only reader is the input x of another bf16 linear
// layer, and not a graph output: the producer writes it as bf16 and the consumer reads it
// without a cast (ops::LinearBf16Io), e.g. the GELU output between the two FFN GEMMs, and the
// attention context before attention.output. Also the output of a bf16 linear layer read only
// as qkv by bf16 attention score and context products (the fused qkv), which copy their
// head-major Q, K and V from it rather than cast them. runtime/step_rules.cpp.
std::vector<char> bf16_linear_handoffs(const Graph& g);

// bf16, training and inference: per tensor, 1 for the output of a dropout read only as the
// probabilities P by bf16 attention products (context P V, and dV = P^T dctx on the backward's
// recomputation): the dropout writes it as bf16 (ops::dropout_forward_bf16) and the products
// read it in place instead of casting it. runtime/step_rules.cpp.
std::vector<char> bf16_probs_handoffs(const Graph& g);

// Every tensor handed over in bf16, as the executor runs the graph: the probabilities, and in
// inference (not `training`: the backward reads those tensors again) the linear and attention
// handoffs too.
std::vector<char> bf16_handoffs(const Graph& g, bool training);

// Training: a linear weight larger than this (the tied MLM decoder) is read unpacked by its
// GEMMs rather than doubled in memory by a packed copy.
inline constexpr int64_t kLargeWeightBytes = 32 << 20;

// Training: whether GEMM node `n` reorders its B operand into the layout oneDNN picks before the
// matmul (a packed copy; ops::GemmInput). linear: the weight, unless larger than
// kLargeWeightBytes. f32 linear_grad_input (B = w) and linear_grad_weight (B = x): the same
// rule, because oneDNN's f32 brgemm reads a plain B at half speed on some shapes. bf16 backward
// GEMMs cast B into a dense copy instead (a bf16 packing reorder costs more than it saves).
// Attention GEMMs: never. runtime/step_rules.cpp; hwmodel's CPU model charges the reorder.
bool gemm_b_packed(const Graph& g, const Node& n);

// bf16 training: a forward linear layer whose input x the backward recomputes for the layer's
// dW GEMM (a layernorm output, the GELU output, the attention context) keeps its bf16 copy of x
// for that GEMM, which would make the same copy of the same values; the recomputation, read by
// nothing else, does not run. Per node, its part and the linear layer that keeps the copy
// (none in inference and fp32 graphs). runtime/step_rules.cpp.
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

// Per node: how many nodes, from it on, the executor runs in its step, as one pass bit-identical
// to their kernels run one after another; 0 for a node an earlier step ran (its own step is
// empty; a profile books the run's time on its first node, and hwmodel's CPU model prices it
// so). Each node whose output is read only by the next node of the run, in one phase:
//   2: a dropout and the residual add it feeds (ops::dropout_add_forward); a dropout_grad and
//      the softmax_grad whose dy it is (ops::dropout_softmax_backward);
//   3: attention scores, their softmax and the context product (ops::FusedAttention: the
//      probabilities of one block of heads stay in the thread's cache): inference, and
//      training without attention dropout (there the backward recomputes both); only with at
//      least as many sequences as `threads` (the threads the executor runs on): with fewer, the
//      blocks' single-threaded products lose to the kernels' own threading (BERT-base, one
//      sequence, 2 threads, bf16: 38.5 against 39.6 seq/s, docs/training.md).
// The executor keeps the kernels apart when a pair's buffers overlap other than element for
// element. Everything else: 1. runtime/step_rules.cpp.
std::vector<uint8_t> fused_steps(const Graph& g, int64_t threads = 1);
inline constexpr uint8_t kFusedPair = 2;       // fused_steps: a dropout pair
inline constexpr uint8_t kFusedAttention = 3;  // fused_steps: scores, softmax, context

// Per node: how many optimizer nodes, from it on, the executor updates in one step (one
// parallel pass over all their tensors for AdamW, two for LAMB: ops::adamw_update_fused,
// lamb_update_fused): the length of a run of consecutive adamw_update (or lamb_update) nodes
// of one phase on its first node, 0 on the run's other nodes (a profile books the run's time
// on its first node, and hwmodel's CPU model prices it there), 1 on every other node.
// runtime/step_rules.cpp.
std::vector<int64_t> optimizer_runs(const Graph& g);

}  // namespace bertlab

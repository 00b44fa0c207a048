#pragma once
// GEMM ops: linear layers and the two attention products, on oneDNN matmul.
// Weights are reordered once into the layout oneDNN picks (format_tag::any); primitives are
// created once per shape; forward calls allocate nothing. Every GEMM runs in f32 or, with
// `bf16`, on bf16 copies of its f32 inputs with f32 accumulation and f32 output (ops/bf16.h);
// packed weights are then stored in bf16.
#include <array>
#include <cstdint>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/activation.h"
#include "ops/bf16.h"
#include "ops/dnnl_context.h"
#include <string>
#include <vector>

namespace bertlab::ops {

// y (M,N) = act(x (M,K) * w^T + b) [+ residual (M,N)], w stored (N,K) as in HF Linear.
void linear_forward_reference(float* y, const float* x, const float* w, const float* b,
                              const float* residual, int64_t M, int64_t N, int64_t K,
                              Activation act);

// bf16 activations handed from one linear layer to the next without an f32 round trip: the
// producer writes y as bf16 (y_bf16) and the consumer reads x as that bf16 array (x_bf16) instead
// of casting an f32 x. The float* arguments then point at bf16 data. Rounding is the same
// (nearest even), so the consumer sees the bits a cast would give.
struct LinearBf16Io {
  bool x_bf16 = false, y_bf16 = false;
};

class Linear {
 public:
  // packed: weights in the layout oneDNN picks (pack_weights*); otherwise the HF (N,K) array is
  // read as it is (forward_packed with w itself), which needs no copy of a very large weight.
  Linear(int64_t M, int64_t N, int64_t K, Activation act, bool residual, bool packed = true,
         bool bf16 = false, LinearBf16Io io = {});
  // Reorders w (N,K) into the packed layout kept by this object; again whenever w changes.
  void pack_weights(const float* w);
  // y (M,N), x (M,K), b (N), residual (M,N) or null when built without one; uses the weights
  // packed by pack_weights().
  void forward(float* y, const float* x, const float* b, const float* residual) const;
  // The same with weights packed elsewhere (packed_bytes() bytes, by pack_weights_into()).
  void pack_weights_into(const float* w, void* packed) const;
  void forward_packed(const void* packed, float* y, const float* x, const float* b,
                      const float* residual) const;
  int64_t packed_bytes() const { return static_cast<int64_t>(pd_.weights_desc().get_size()); }
  // Unpacked f32: the matmul reads the HF array in place, so there is nothing to prepare.
  // Otherwise pack_weights_into() writes what the matmul reads (the packed layout, or for
  // unpacked bf16 the dense bf16 copy), and forward_prepared() takes that copy as it is.
  bool weights_in_place() const { return !w_.desc().is_zero() && w_.copy_bytes() == 0; }
  void forward_prepared(const void* prepared, float* y, const float* x, const float* b,
                        const float* residual) const;
  // Packs w into scratch slot 1 of the calling thread (where the backward GEMMs keep their
  // packed or cast B operands), then runs forward_prepared() on it: weights that change every
  // step cost no memory of their own.
  void forward_repacking(const float* w, float* y, const float* x, const float* b,
                         const float* residual) const;
  // bf16: from now on every call casts x into `copy` (x_copy_bytes() bytes, kept by the
  // caller, e.g. for the layer's LinearGradWeight::forward_cast_x) instead of the scratch slot.
  size_t x_copy_bytes() const { return x_.copy_bytes(); }
  void keep_x_in(void* copy);
  std::string impl_name() const;

 private:
  int64_t M_, N_, K_;
  bool residual_;
  GemmInput x_, w_;  // w_: the HF weights when not packed
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
  dnnl::reorder::primitive_desc pack_pd_;
  dnnl::reorder pack_;
  mutable PrimitiveArgs pack_args_;
  dnnl::memory packed_;  // empty until pack_weights()
  void* keep_x_ = nullptr;  // keep_x_in()
};

// One input of a bf16 attention product: `rows` rows of `width` floats, `stride` floats apart,
// cast densely in their own order (cast_rows_to_bf16) into scratch slot `slot` of the calling
// thread; `view` is how the matmul reads that copy (a head of a dense (B,S,H) array, the
// scores, or a transpose of either), a layout oneDNN's bf16 brgemm takes. (A strided bf16 view
// of the fused qkv, row stride 3H, falls back to a slow GEMM.)
// Where the bf16 data the matmul reads comes from, fixed when the op is built.
enum class Bf16Source : uint8_t {
  cast,      // f32 rows rounded into the slot's copy
  copy,      // bf16 rows (an inference handoff) copied into the slot's copy, rearranged
  reused,    // the slot already holds this copy, left by an earlier GEMM (shared_attention_casts)
  in_place,  // the caller's buffer is bf16 in the view's layout (a dropout's bf16 probabilities)
};
struct AttentionBf16Input {
  int64_t rows = 0, width = 0, stride = 0;
  int slot = 0;
  dnnl::memory::desc view;
  int64_t head = 0, seq = 0;  // > 0: a head-major copy (Bf16Rows::head, seq)
  Bf16Source source = Bf16Source::cast;
};

// Attention products on the fused qkv activation (B,S,3H), H = heads * d:
// scores (B,heads,S,S) = Q K^T * scale + bias[b, key]   (bias: 0 keep, very negative drop)
// ctx (B,S,H)          = P V, heads concatenated
void attn_scores_reference(float* scores, const float* qkv, const float* mask_bias, int64_t B,
                           int64_t S, int64_t heads, int64_t d, float scale);
void attn_context_reference(float* ctx, const float* probs, const float* qkv, int64_t B,
                            int64_t S, int64_t heads, int64_t d);

class AttentionScores {
 public:
  // qkv_bf16 (bf16 only): qkv is bf16 (B,S,3H), written so by the qkv linear layer
  // (LinearBf16Io::y_bf16); Q and K are copied from it rather than cast.
  // all_heads > heads: the products of `heads` consecutive heads of a qkv of all_heads heads
  // (H = all_heads * d; the caller points qkv at the first head's Q columns); 0: all of them.
  // like: the implementations another scores op chose (impls()), taken when oneDNN offers them
  // for this problem too (FusedAttention: the same kernels as the whole batch, the same bits).
  AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16 = false,
                  bool qkv_bf16 = false, int64_t all_heads = 0, const std::array<std::string, 2>& like = {});
  // The implementations oneDNN picks for these products (with the mask-bias post-op, without),
  // without building them.
  static std::array<std::string, 2> impls(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16,
                                          bool qkv_bf16);
  // A batch without padding has an all-zero mask bias: the product then runs without the
  // bias post-op (the same bits, since x + 0 = x), which costs as much as a third of the
  // matmul at BERT-base shapes.
  void forward(float* scores, const float* qkv, const float* mask_bias) const;
  std::string impl_name() const;

 private:
  // build false: the primitive descriptors only (impls()), no primitives, no scratch.
  AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16, bool qkv_bf16,
                  int64_t all_heads, const std::array<std::string, 2>& like, bool build);
  int64_t B_, S_, H_;
  bool bf16_;
  std::array<AttentionBf16Input, 2> in16_;  // bf16: Q, K^T
  dnnl::matmul::primitive_desc pd_, unmasked_pd_;  // with the mask-bias post-op; without it
  dnnl::matmul prim_, unmasked_;
  mutable PrimitiveArgs args_, unmasked_args_;  // bound on first use; later calls swap pointers
};

class AttentionContext {
 public:
  // y_bf16 (bf16 only): ctx is written as bf16 (B,S,H), rounded to nearest even at the store,
  // for a bf16 linear layer that reads it without a cast (LinearBf16Io::x_bf16).
  // qkv_bf16: as for AttentionScores (V copied from a bf16 qkv). probs_bf16: the probabilities
  // are bf16 already (a dropout that wrote them so, ops::dropout_forward_bf16) and are read in
  // place.
  // all_heads: as for AttentionScores (ctx then points at the first head's columns).
  // like: as for AttentionScores.
  AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16 = false, bool y_bf16 = false,
                   bool qkv_bf16 = false, bool probs_bf16 = false, int64_t all_heads = 0,
                   const std::string& like = {});
  static std::string impl(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16, bool y_bf16, bool qkv_bf16);
  void forward(float* ctx, const float* probs, const float* qkv) const;
  std::string impl_name() const;

 private:
  AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16, bool y_bf16, bool qkv_bf16,
                   bool probs_bf16, int64_t all_heads, const std::string& like, bool build);
  int64_t H_;
  bool bf16_;
  std::array<AttentionBf16Input, 2> in16_;  // bf16: P, V
  // The `like` kernel with a dense destination only (pd_'s dst, (B,heads,S,d)): the product
  // goes here, then into ctx.
  mutable std::vector<std::byte> dense_dst_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

// Scores, softmax and context of one attention layer in one pass (inference, or training
// without attention dropout): the sequences, or blocks of heads of them, are shared out
// among the threads, and each thread runs the three products of its block one after another
// on its own scratch, so the block's probabilities (heads x S x S floats) stay in its cache
// instead of going to memory and back twice. Bit-identical to AttentionScores, Softmax and
// AttentionContext run on the whole batch on as many threads: each (sequence, head) product
// and each softmax row is computed by the same kernels (test "[ops]" "Fused attention ..."),
// except fp32 products that oneDNN's gemm:jit splits among threads on the whole batch
// (sequences x heads not a multiple of the threads): those agree to rounding. A block's
// products use the implementations oneDNN picks for the whole batch where it offers them for
// the block (on a Zen 4 it picks gemm:jit for one head's bf16 context product at seq 520 and
// brgemm for the batch, which sum in another order).
class FusedAttention {
 public:
  // `threads`: the OpenMP threads forward() will share the blocks among. The flags are those
  // of AttentionScores (qkv_bf16) and AttentionContext (y_bf16).
  FusedAttention(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16, bool qkv_bf16,
                 bool y_bf16, int threads);
  ~FusedAttention();
  // ctx (B,S,H) from qkv (B,S,3H) and the mask bias (B,S); bf16 pointers where the flags say.
  // ctx must not overlap qkv or the mask: a block's context is written while other blocks
  // still read them (the executor's memory plan keeps them apart, plan_memory's runs).
  void forward(float* ctx, const float* qkv, const float* mask_bias) const;
  // Heads per block: all heads, unless fewer blocks than threads or blocks over a probability
  // scratch of kBlockBytes would leave a thread idle or the cache.
  int64_t block_heads() const { return hb_; }
  static constexpr int64_t kBlockBytes = int64_t{1} << 20;

 private:
  struct PerThread;
  int64_t B_, S_, heads_, d_, hb_;
  bool qkv_bf16_, y_bf16_;
  std::vector<std::unique_ptr<PerThread>> per_thread_;
};

}  // namespace bertlab::ops

namespace bertlab::ops {

// Backward of a linear layer y = x w^T + b (w stored (N,K)):
// dx (M,K) = dy (M,N) w (N,K)
void linear_grad_input_reference(float* dx, const float* dy, const float* w, int64_t M, int64_t N,
                                 int64_t K);
// dw (N,K) += dy^T x, db (N) += column sums of dy   (gradients accumulate)
void linear_grad_weight_reference(float* dw, float* db, const float* dy, const float* x, int64_t M,
                                  int64_t N, int64_t K);

class LinearGradInput {
 public:
  // share_dy (bf16): the bf16 copy of dy goes to scratch slot kSharedDySlot, where the
  // LinearGradWeight of the same layer, built with share_dy, reads it instead of casting again;
  // the same pass leaves dy's column sums for its bias gradient (shared_dy_sums).
  // pack_w: w is reordered into the layout the matmul picks (GemmInput's packed mode).
  LinearGradInput(int64_t M, int64_t N, int64_t K, bool bf16 = false, bool share_dy = false,
                  bool pack_w = false);
  void forward(float* dx, const float* dy, const float* w) const;
  // The weights' bf16 or packed copy (weight_copy_bytes() bytes, 0 when w is read in place),
  // made by cast_weights_into() and kept by the caller while the weights do not change.
  size_t weight_copy_bytes() const { return w_.copy_bytes(); }
  void cast_weights_into(const float* w, void* copy) const { w_.convert_into(w, copy); }
  void forward_cast(float* dx, const float* dy, const void* w_copy) const;
  std::string impl_name() const;

 private:
  int64_t M_, N_;
  bool share_dy_;
  GemmInput dy_, w_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

class LinearGradWeight {
 public:
  // share_dy (bf16): dy's bf16 copy is the one the layer's LinearGradInput (built with
  // share_dy) left in scratch slot kSharedDySlot of the calling thread; the caller ensures that
  // that GEMM ran last among those that write the slot, on the same dy. The bias gradient
  // then folds the column sums that GEMM's cast left (shared_dy_sums) instead of reading dy.
  // pack_x: x is reordered into the layout the matmul picks (GemmInput's packed mode).
  LinearGradWeight(int64_t M, int64_t N, int64_t K, bool bf16 = false, bool share_dy = false,
                   bool pack_x = false);
  void forward(float* dw, float* db, const float* dy, const float* x) const;
  // The same with x as the bf16 copy the layer's Linear kept (Linear::keep_x_in): the copy
  // this GEMM would make of the same values.
  size_t x_copy_bytes() const { return x_.copy_bytes(); }
  void forward_cast_x(float* dw, float* db, const float* dy, const void* x_copy) const;
  std::string impl_name() const;

 private:
  int64_t M_, N_;
  bool share_dy_;
  GemmInput dy_t_, x_;
  mutable std::vector<float> partials_;  // per-thread column sums of dy (bias gradient)
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

// Attention backward on the fused layouts of the forward (qkv (B,S,3H), dqkv (B,S,3H)).
enum class QkvSlot { q = 0, k = 1, v = 2 };
// slot q: dQ = dS K * scale;  slot k: dK = dS^T Q * scale   (written into that third of dqkv)
void attn_scores_grad_reference(float* dqkv, const float* dscores, const float* qkv, int64_t B,
                                int64_t S, int64_t heads, int64_t d, float scale, QkvSlot slot);
// dprobs (B,heads,S,S) = dctx V^T
void attn_context_grad_probs_reference(float* dprobs, const float* dctx, const float* qkv,
                                       int64_t B, int64_t S, int64_t heads, int64_t d);
// V third of dqkv = P^T dctx
void attn_context_grad_v_reference(float* dqkv, const float* dctx, const float* probs, int64_t B,
                                   int64_t S, int64_t heads, int64_t d);

// One batched product of the attention backward, on strided views (no copies).
class AttentionGrad {
 public:
  enum class Kind { scores_q, scores_k, context_probs, context_v };
  // bf16: each input is cast into a scratch slot of the calling thread: dS (scores_q/k), dctx
  // (context_probs, context_v) into slot 0; P (context_v) and V (context_probs) into slot 1; K
  // (scores_q) into kKSlot and Q (scores_k) into kQSlot, the slots where AttentionScores casts
  // them. Bit i of `reuse`: input i (a, b of forward()) is not cast, its copy is read from its
  // slot, where an earlier GEMM left the same cast of the same values (the caller ensures that
  // no other writer of the slot ran since: runtime::shared_attention_casts).
  // probs_bf16 (context_v): the probabilities (b) are bf16 already and are read in place, as
  // AttentionContext's probs_bf16.
  AttentionGrad(Kind kind, int64_t B, int64_t S, int64_t heads, int64_t d, float scale,
                bool bf16 = false, unsigned reuse = 0, bool probs_bf16 = false);
  // scores_q/k: (dqkv, dscores, qkv); context_probs: (dprobs, dctx, qkv); context_v: (dqkv, dctx, probs)
  void forward(float* out, const float* a, const float* b) const;
  std::string impl_name() const;

 private:
  Kind kind_;
  int64_t B_, S_, H_, heads_;
  bool bf16_;
  std::array<AttentionBf16Input, 2> in16_;  // bf16: the matmul's src and weights
  bool staged_ = false;  // bf16 with a dqkv output: staged head-major, then copied into it
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

}  // namespace bertlab::ops

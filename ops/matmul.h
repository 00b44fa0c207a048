#pragma once
// GEMM ops: linear layers and the two attention products, on oneDNN matmul.
// Weights are reordered once into the layout oneDNN picks (format_tag::any); primitives are
// created once per shape; forward calls allocate nothing.
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace bertlab::ops {

enum class Activation { none, gelu, tanh };
Activation activation_from_string(const std::string& s);

// y (M,N) = act(x (M,K) * w^T + b) [+ residual (M,N)], w stored (N,K) as in HF Linear.
void linear_forward_reference(float* y, const float* x, const float* w, const float* b,
                              const float* residual, int64_t M, int64_t N, int64_t K,
                              Activation act);

class Linear {
 public:
  Linear(int64_t M, int64_t N, int64_t K, Activation act, bool residual);
  // Reorders w (N,K) into the packed layout; call again whenever w changes.
  void pack_weights(const float* w);
  // y (M,N), x (M,K), b (N), residual (M,N) or null when built without one.
  void forward(float* y, const float* x, const float* b, const float* residual) const;
  int64_t packed_bytes() const { return static_cast<int64_t>(packed_.get_desc().get_size()); }
  std::string impl_name() const;

 private:
  int64_t M_, N_, K_;
  bool residual_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  dnnl::reorder::primitive_desc pack_pd_;
  dnnl::memory packed_;
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
  AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale);
  void forward(float* scores, const float* qkv, const float* mask_bias) const;
  std::string impl_name() const;

 private:
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
};

class AttentionContext {
 public:
  AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d);
  void forward(float* ctx, const float* probs, const float* qkv) const;
  std::string impl_name() const;

 private:
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
};

}  // namespace bertlab::ops

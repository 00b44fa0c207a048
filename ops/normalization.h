#pragma once
// Layer normalization over the last axis and softmax over the last axis.
#include <cstdint>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/dnnl_context.h"

namespace bertlab::ops {

// y (rows,H) = (x - mean) * rstd * gamma + beta, biased variance, eps inside the root.
void layernorm_forward_reference(float* y, const float* x, const float* gamma, const float* beta,
                                 int64_t rows, int64_t H, float eps);

class LayerNorm {
 public:
  LayerNorm(int64_t rows, int64_t H, float eps);
  void forward(float* y, const float* x, const float* gamma, const float* beta) const;

 private:
  dnnl::layer_normalization_forward::primitive_desc pd_;
  dnnl::layer_normalization_forward prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

// y (rows,L) = softmax(x) over L; y may alias x.
void softmax_forward_reference(float* y, const float* x, int64_t rows, int64_t L);

class Softmax {
 public:
  Softmax(int64_t rows, int64_t L);
  void forward(float* y, const float* x) const;

 private:
  dnnl::softmax_forward::primitive_desc pd_;
  dnnl::softmax_forward prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

}  // namespace bertlab::ops

namespace bertlab::ops {

// Layernorm backward, recomputing mean and rstd from x (no saved statistics):
// dx (rows,H); dgamma (H) += sum dy * xhat; dbeta (H) += sum dy
// `scratch` keeps the per-thread partial sums between calls (the overload without it allocates).
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, int64_t rows, int64_t H, float eps,
                        std::vector<float>& scratch);
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x,
                        const float* gamma, int64_t rows, int64_t H, float eps);
void layernorm_backward_reference(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, int64_t rows, int64_t H,
                                  float eps);

// dx (rows,L) = y * (dy - sum(dy * y)) from the softmax output y
void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t L);
// One row of it (shared with the fused dropout + softmax backward, ops/elementwise.h, so that
// both round identically); dx may alias dy or y.
inline void softmax_backward_row(float* dx, const float* dy, const float* y, int64_t L) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < L; ++i) dot += dy[i] * y[i];
#pragma omp simd
  for (int64_t i = 0; i < L; ++i) dx[i] = y[i] * (dy[i] - dot);
}
void softmax_backward_reference(float* dx, const float* dy, const float* y, int64_t rows, int64_t L);

}  // namespace bertlab::ops

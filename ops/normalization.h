#pragma once
// Layer normalization over the last axis and softmax over the last axis.
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

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
};

}  // namespace bertlab::ops

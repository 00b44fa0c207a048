#pragma once
// Memory-bound element-wise ops: activations, residual add, the attention-mask bias,
// the [CLS] row gather. Fast paths are vectorised OpenMP loops or oneDNN eltwise.
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/activation.h"
#include "ops/dnnl_context.h"

namespace bertlab::ops {

// y (n) = act(x); y may alias x.
void activation_forward_reference(float* y, const float* x, int64_t n, Activation act);

class ActivationOp {
 public:
  ActivationOp(int64_t n, Activation act);
  void forward(float* y, const float* x) const;

 private:
  dnnl::eltwise_forward::primitive_desc pd_;
  dnnl::eltwise_forward prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

// y (n) = a + b
void add_forward(float* y, const float* a, const float* b, int64_t n);
void add_forward_reference(float* y, const float* a, const float* b, int64_t n);
// y (n) = alpha x
void scale_forward(float* y, const float* x, float alpha, int64_t n);
// y (n) = a * b
void mul_forward(float* y, const float* a, const float* b, int64_t n);
void mul_forward_reference(float* y, const float* a, const float* b, int64_t n);

// The additive attention bias of each key: 0 where mask != 0, the lowest float elsewhere
// (as Hugging Face does), so a masked key gets probability exactly 0.
// bias (n), mask (n) of 0/1
void mask_bias_forward(float* bias, const int32_t* mask, int64_t n);

// y (B,H) = x[:, 0, :] of x (B,S,H)
void first_token_forward(float* y, const float* x, int64_t B, int64_t S, int64_t H);

}  // namespace bertlab::ops

namespace bertlab::ops {

// dx = dy * act'(x), reading the input x, or the output y when the activation's
// grad_from_output is set (ops/activation.h).
void activation_backward_reference(float* dx, const float* dy, const float* x_or_y, int64_t n,
                                   Activation act);
class ActivationGrad {
 public:
  ActivationGrad(int64_t n, Activation act);
  void forward(float* dx, const float* dy, const float* x_or_y) const;

 private:
  dnnl::eltwise_backward::primitive_desc pd_;
  dnnl::eltwise_backward prim_;
  mutable PrimitiveArgs args_;  // bound on first use; later calls swap pointers
};

// Counter-based dropout: element i is kept when hash(key, salt, i) >= p * 2^32, where key
// mixes (seed, step, micro-batch); the same key regenerates the mask in the backward, and the
// result does not depend on the thread count. Kept elements are scaled by 1 / (1 - p).
struct DropoutKey {
  uint64_t seed = 0, step = 0, micro = 0;
};
// y (n) = dropout(x); used for the backward too (dx = dropout(dy) with the same key and salt).
void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t salt, DropoutKey key);
// The same written as bf16 (to_bf16 of each value: bit-identical to dropout_forward then a cast),
// for bf16 attention products that read the probabilities as they are (bf16 handoff). y must not
// overlap x (the threads' bf16 writes would overtake other threads' f32 reads).
void dropout_forward_bf16(uint16_t* y, const float* x, int64_t n, float p, uint64_t salt, DropoutKey key);
bool dropout_keeps(int64_t i, float p, uint64_t salt, DropoutKey key);  // the mask, for tests

// A hidden-state dropout and the residual add after it in one pass (the executor runs a dropout
// whose only reader is the next node, an add, as this): y (n) = dropout(x) + r, bit-identical to
// dropout_forward then add_forward. y may alias x or r (the same elements).
void dropout_add_forward(float* y, const float* x, const float* r, int64_t n, float p, uint64_t salt,
                         DropoutKey key);

// The attention's dropout backward and softmax backward in one pass (the executor runs a
// dropout_grad node whose only reader is the next node, a softmax_grad, as this):
// dx (rows,L) = softmax_backward(dropout(dy), y), the mask of element (r, i) that of flat index
// r * L + i as in dropout_forward; bit-identical to the two kernels one after the other.
// dx may alias dy or y.
void dropout_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t L, float p,
                              uint64_t salt, DropoutKey key);

}  // namespace bertlab::ops

// The rules of the element-wise kinds (kernels in ops/elementwise.h): the attention-mask bias,
// add, scale, mul, the activations and their gradients, dropout and its gradient.
#include "ops/elementwise.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::elementwise {

namespace {

constexpr double kDropoutFlops = 2;  // hash compare, scale

// mask_bias: attention_mask(B,S) i32 -> bias (B,S)
OutputTypes mask_bias_outputs(const Graph& g, const Node& n) {
  expect_rank(n, in_shape(g, n, 0), 2, "attention_mask");
  return same_as_input0(g, n);
}
void mask_bias_backward(Differentiator&, const Node&, int) {}  // depends on inputs only
std::function<void()> mask_bias_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  const int64_t out_numel = b.out_numel(n);
  const int32_t* mask = b.ids(n, 0);
  return [=] { ops::mask_bias_forward(out, mask, out_numel); };
}

// Two inputs of one shape -> one output of that shape; `verb` names the op in the error.
OutputTypes same_shape_pair(const Graph& g, const Node& n, const char* verb) {
  check(in_shape(g, n, 0) == in_shape(g, n, 1), "node '{}': cannot {} {} and {}", n.name, verb,
        shape_str(in_shape(g, n, 0)), shape_str(in_shape(g, n, 1)));
  return same_as_input0(g, n);
}

// add: a, b (same shape) -> a + b
OutputTypes add_outputs(const Graph& g, const Node& n) { return same_shape_pair(g, n, "add"); }
void add_backward(Differentiator& d, const Node& n, int dy) {
  d.contribute(n.inputs[0], dy);
  d.contribute(n.inputs[1], dy);
}
// Two inputs, one output, all of n elements: y = f(a, b) element by element (add, mul).
using BinaryKernel = void (*)(float* y, const float* a, const float* b, int64_t n);
std::function<void()> bind_binary(StepBinder& b, const Node& n, BinaryKernel kernel) {
  float* out = b.out(n, 0);
  const int64_t out_numel = b.out_numel(n);
  const float *x = b.in(n, 0), *y = b.in(n, 1);
  return [=] { kernel(out, x, y, out_numel); };
}
std::function<void()> add_kernel(StepBinder& b, const Node& n) { return bind_binary(b, n, ops::add_forward); }

// scale: x -> alpha x; its gradient is the same op
void scale_backward(Differentiator& d, const Node& n, int dy) {
  d.contribute(n.inputs[0], d.emit1(OpKind::scale, n.name + ".grad", {dy}, n.attrs));
}
std::function<void()> scale_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  const int64_t out_numel = b.out_numel(n);
  const float* x = b.in(n, 0);
  const float alpha = n.attrs.at("alpha").get<float>();
  return [=] { ops::scale_forward(out, x, alpha, out_numel); };
}

// mul: a, b (same shape) -> a * b; da = dy * b and db = dy * a are muls too
OutputTypes mul_outputs(const Graph& g, const Node& n) { return same_shape_pair(g, n, "multiply"); }
void mul_backward(Differentiator& d, const Node& n, int dy) {
  const auto& in = n.inputs;
  d.contribute(in[0], d.emit1(OpKind::mul, n.name + ".grad_a", {dy, d.saved(in[1])}));
  d.contribute(in[1], d.emit1(OpKind::mul, n.name + ".grad_b", {dy, d.saved(in[0])}));
}
std::function<void()> mul_kernel(StepBinder& b, const Node& n) { return bind_binary(b, n, ops::mul_forward); }

// activation: x -> act(x); attr activation (a row of ops/activation.h)
OutputTypes activation_outputs(const Graph& g, const Node& n) {
  activation_of(n);
  return same_as_input0(g, n);
}
double activation_flops(const Graph& g, const Node& n) {
  return ops::activation_info(activation_of(n)).forward_flops * out0_numel(g, n);
}
void activation_backward(Differentiator& d, const Node& n, int dy) {
  // The derivative reads the input x, or the output y (ops/activation.h).
  const bool from_y = ops::activation_info(activation_of(n)).grad_from_output;
  d.contribute(n.inputs[0], d.emit1(OpKind::activation_grad, n.name + ".grad",
                                    {dy, d.saved(from_y ? n.outputs[0] : n.inputs[0])},
                                    {{"activation", n.attrs.at("activation")}}));
}
std::function<void()> activation_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto op = std::make_shared<ops::ActivationOp>(b.out_numel(n), activation_of(n));
  const float* x = b.in(n, 0);
  return [=] { op->forward(out, x); };
}

// activation_grad: dy, x (or y, per the activation's grad_from_output) -> dx
OutputTypes activation_grad_outputs(const Graph& g, const Node& n) {
  activation_of(n);
  return gradient_like_input1(g, n);
}
double activation_grad_flops(const Graph& g, const Node& n) {
  return ops::activation_info(activation_of(n)).backward_flops * out0_numel(g, n);
}
std::function<void()> activation_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto op = std::make_shared<ops::ActivationGrad>(b.out_numel(n), activation_of(n));
  const float *dy = b.in(n, 0), *v = b.in(n, 1);
  return [=] { op->forward(out, dy, v); };
}

// dropout: x -> x * keep / (1 - p); dropout_grad: dy -> dx, the same mask (attrs p, salt)
double dropout_flops(const Graph& g, const Node& n) { return kDropoutFlops * out0_numel(g, n); }
int64_t dropout_bytes(const Graph& g, const Node& n) {  // the mask is recomputed, not stored
  return in_bytes(g, n, 0) + out_bytes(g, n, 0);
}
void dropout_backward(Differentiator& d, const Node& n, int dy) {
  d.contribute(n.inputs[0], d.emit1(OpKind::dropout_grad, n.name + ".grad", {dy}, n.attrs));
}
std::function<void()> dropout_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  const int64_t out_numel = b.out_numel(n);
  StepContext* ctx = b.context();
  const float* x = b.in(n, 0);
  const float p = n.attrs.at("p").get<float>();
  const uint64_t salt = n.attrs.at("salt").get<uint64_t>();
  if (n.kind == OpKind::dropout && b.handed_off(n.outputs[0])) {  // bf16 probabilities
    auto* out16 = reinterpret_cast<uint16_t*>(out);
    return [=] {
      ops::dropout_forward_bf16(out16, x, out_numel, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)});
    };
  }
  return [=] { ops::dropout_forward(out, x, out_numel, p, salt, {ctx->seed, uint64_t(ctx->step), uint64_t(ctx->micro)}); };
}

}  // namespace

const OpRules mask_bias{mask_bias_outputs, flops_per_input0, io_bytes, nullptr, mask_bias_backward, mask_bias_kernel};
const OpRules add{add_outputs, flops_per_input0, io_bytes, nullptr, add_backward, add_kernel};
const OpRules scale{same_as_input0, flops_per_input0, io_bytes, nullptr, scale_backward, scale_kernel};
const OpRules mul{mul_outputs, flops_per_input0, io_bytes, nullptr, mul_backward, mul_kernel};
const OpRules activation{activation_outputs, activation_flops, io_bytes, nullptr, activation_backward, activation_kernel};
const OpRules activation_grad{activation_grad_outputs, activation_grad_flops, io_bytes, nullptr, nullptr,
                              activation_grad_kernel};
const OpRules dropout{same_as_input0, dropout_flops, dropout_bytes, nullptr, dropout_backward, dropout_kernel};
const OpRules dropout_grad{same_as_input0, dropout_flops, dropout_bytes, nullptr, nullptr, dropout_kernel};

}  // namespace bertlab::rules::elementwise

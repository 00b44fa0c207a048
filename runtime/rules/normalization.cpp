// The rules of the row normalisations (kernels in ops/normalization.h): softmax and layernorm,
// and their gradients. Lab 2's seam may replace the layernorm kernels (runtime/kernel_seam.h).
#include "ops/normalization.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/kernel_seam.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::normalization {

namespace {

// FLOPs per element.
constexpr double kSoftmaxFlops = 5;         // max, subtract, exp, sum, divide
constexpr double kSoftmaxGradFlops = 4;     // product, sum, subtract, multiply
constexpr double kLayernormFlops = 7;       // sum, subtract, square, sum, scale, gamma, beta
constexpr double kLayernormGradFlops = 12;  // recompute stats, two reductions, dx, dgamma, dbeta

// softmax: x(...,L) -> softmax over the last axis
double softmax_flops(const Graph& g, const Node& n) { return kSoftmaxFlops * out0_numel(g, n); }
void softmax_backward(Differentiator& d, const Node& n, int dy) {
  d.contribute(n.inputs[0], d.emit1(OpKind::softmax_grad, n.name + ".grad", {dy, d.saved(n.outputs[0])}));
}
std::function<void()> softmax_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  auto op = std::make_shared<ops::Softmax>(numel(s) / s.back(), s.back());
  const float* x = b.in(n, 0);
  return [=] { op->forward(out, x); };
}

// softmax_grad: dy, y -> dx = y * (dy - sum(dy * y))
double softmax_grad_flops(const Graph& g, const Node& n) { return kSoftmaxGradFlops * out0_numel(g, n); }
std::function<void()> softmax_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const float *dy = b.in(n, 0), *y = b.in(n, 1);
  return [=] { ops::softmax_backward(out, dy, y, numel(s) / s.back(), s.back()); };
}

// layernorm: x(...,H), gamma(H), beta(H) -> (...,H); attr eps
OutputTypes layernorm_outputs(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 0);
  check(!x.empty() && in_shape(g, n, 1) == Shape{x.back()} && in_shape(g, n, 2) == Shape{x.back()},
        "node '{}': gamma {} / beta {} do not match input {}", n.name, shape_str(in_shape(g, n, 1)),
        shape_str(in_shape(g, n, 2)), shape_str(x));
  return same_as_input0(g, n);
}
double layernorm_flops(const Graph& g, const Node& n) { return kLayernormFlops * out0_numel(g, n); }
void layernorm_backward(Differentiator& d, const Node& n, int dy) {
  const auto& in = n.inputs;
  auto outs = d.emit(OpKind::layernorm_grad, n.name + ".grad", {dy, d.saved(in[0]), in[1]},
                     {-1, d.param_grad(in[1]), d.param_grad(in[2])}, n.attrs);
  d.contribute(in[0], outs[0]);
}
std::function<void()> layernorm_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const int64_t rows = numel(s) / s.back(), H = s.back();
  const float eps = n.attrs.at("eps").get<float>();
  const float *x = b.in(n, 0), *gamma = b.in(n, 1), *beta = b.in(n, 2);
  if (auto lab = kernel_seam().layernorm) return [=] { lab(out, x, gamma, beta, rows, H, eps); };
  auto op = std::make_shared<ops::LayerNorm>(rows, H, eps);
  return [=] { op->forward(out, x, gamma, beta); };
}

// layernorm_grad: dy, x, gamma -> dx, dgamma +=, dbeta +=; attr eps
OutputTypes layernorm_grad_outputs(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 1);
  check(in_shape(g, n, 0) == x && in_shape(g, n, 2) == Shape{x.back()},
        "node '{}': gradient {}, input {} and gamma {} disagree", n.name, shape_str(in_shape(g, n, 0)), shape_str(x),
        shape_str(in_shape(g, n, 2)));
  return f32({x, {x.back()}, {x.back()}});
}
double layernorm_grad_flops(const Graph& g, const Node& n) { return kLayernormGradFlops * out0_numel(g, n); }
int64_t layernorm_grad_bytes(const Graph& g, const Node& n) {
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) + in_bytes(g, n, 2) + out_bytes(g, n, 0) + 2 * out_bytes(g, n, 1) +
         2 * out_bytes(g, n, 2);
}
std::function<void()> layernorm_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 1);
  const float *dy = b.in(n, 0), *x = b.in(n, 1), *gamma = b.in(n, 2);
  float *dgamma = b.out(n, 1), *dbeta = b.out(n, 2);
  const float eps = n.attrs.at("eps").get<float>();
  if (auto lab = kernel_seam().layernorm_grad)
    return [=] { lab(out, dgamma, dbeta, dy, x, gamma, numel(s) / s.back(), s.back(), eps); };
  auto scratch = std::make_shared<std::vector<float>>();
  return [=] {
    ops::layernorm_backward(out, dgamma, dbeta, dy, x, gamma, numel(s) / s.back(), s.back(), eps, *scratch);
  };
}

}  // namespace

const OpRules softmax{same_as_input0, softmax_flops, io_bytes, nullptr, softmax_backward, softmax_kernel};
const OpRules softmax_grad{gradient_like_input1, softmax_grad_flops, io_bytes, nullptr, nullptr, softmax_grad_kernel};
const OpRules layernorm{layernorm_outputs, layernorm_flops, io_bytes, nullptr, layernorm_backward, layernorm_kernel};
const OpRules layernorm_grad{layernorm_grad_outputs, layernorm_grad_flops, layernorm_grad_bytes, nullptr, nullptr,
                             layernorm_grad_kernel};

}  // namespace bertlab::rules::normalization

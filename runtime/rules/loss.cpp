// The rules of the cross-entropy loss and its gradient (kernels in ops/loss.h). The loss has no
// backward rule: autodiff seeds it (runtime/autodiff.cpp, seed_loss).
#include "ops/loss.h"

#include "base/error.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::loss {

namespace {

// FLOPs per logit.
constexpr double kCrossEntropyFlops = 4;  // max, exp, sum, log
constexpr double kCrossEntropyGradFlops = 3;

// logits(N,C), labels(N) i32 (-100: ignored)
void check_logits_and_labels(const Graph& g, const Node& n) {
  const auto& logits = in_shape(g, n, 0);
  expect_rank(n, logits, 2, "logits");
  check(in_shape(g, n, 1) == Shape{logits[0]}, "node '{}': labels {} do not match logits {}", n.name,
        shape_str(in_shape(g, n, 1)), shape_str(logits));
}

// cross_entropy: logits, labels -> (3): loss sum, correct, count; attr loss
OutputTypes cross_entropy_outputs(const Graph& g, const Node& n) {
  check_logits_and_labels(g, n);
  return f32({{3}});
}
double cross_entropy_flops(const Graph& g, const Node& n) { return kCrossEntropyFlops * in0_numel(g, n); }
std::function<void()> cross_entropy_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  auto s = b.shape(n, 0);
  const float* logits = b.in(n, 0);
  const int32_t* labels = b.ids(n, 1);
  return [=] {
    auto st = ops::cross_entropy_forward(logits, labels, s[0], s[1]);
    out[0] = static_cast<float>(st.loss_sum), out[1] = static_cast<float>(st.correct),
    out[2] = static_cast<float>(st.count);
  };
}

// cross_entropy_grad: logits, labels -> dlogits(N,C); attr loss (mlm | nsp | classifier: its denominator)
OutputTypes cross_entropy_grad_outputs(const Graph& g, const Node& n) {
  check_logits_and_labels(g, n);
  return same_as_input0(g, n);
}
double cross_entropy_grad_flops(const Graph& g, const Node& n) { return kCrossEntropyGradFlops * in0_numel(g, n); }
std::function<void()> cross_entropy_grad_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  StepContext* ctx = b.context();
  auto s = b.shape(n, 0);
  const float* logits = b.in(n, 0);
  const int32_t* labels = b.ids(n, 1);
  const bool mlm = loss_kind_of(n) == LossKind::mlm;
  return [=] {
    ops::cross_entropy_backward(out, logits, labels, s[0], s[1], mlm ? ctx->mlm_denominator : ctx->nsp_denominator);
  };
}

}  // namespace

const OpRules cross_entropy{cross_entropy_outputs, cross_entropy_flops, io_bytes, nullptr, nullptr,
                            cross_entropy_kernel};
const OpRules cross_entropy_grad{cross_entropy_grad_outputs, cross_entropy_grad_flops, io_bytes, nullptr, nullptr,
                                 cross_entropy_grad_kernel};

}  // namespace bertlab::rules::loss

#include "ops/loss.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "ops/parallel.h"
#include "base/error.h"

namespace bertlab::ops {

namespace {
// The first index of the largest element, `mx` (speed only: the maximum itself comes from a
// vectorised pass, as np.argmax returns the first of equal maxima).
int64_t first_max(const float* x, int64_t C, float mx) { return std::find(x, x + C, mx) - x; }

void check_label(int32_t label, int64_t row, int64_t C) {
  check(label == kIgnoreLabel || (label >= 0 && label < C),
        "cross-entropy label {} at row {} is outside [0, {}) and is not {}", label, row, C,
        kIgnoreLabel);
}
}  // namespace

CrossEntropyStats cross_entropy_forward(const float* logits, const int32_t* labels, int64_t N,
                                        int64_t C) {
  for (int64_t r = 0; r < N; ++r) check_label(labels[r], r, C);
  return ordered_reduce(
      N, CrossEntropyStats{},
      [&](int64_t begin, int64_t end, CrossEntropyStats& part) {
        for (int64_t r = begin; r < end; ++r) {
          if (labels[r] == kIgnoreLabel) continue;
          const float* x = logits + r * C;
          const auto row = Eigen::Map<const Eigen::ArrayXf>(x, C);
          const float mx = row.maxCoeff();
          const int64_t arg = first_max(x, C, mx);
          const float sum = (row - mx).exp().sum();
          part.loss_sum += std::log(double(sum)) + mx - x[labels[r]];
          part.correct += arg == labels[r];
          part.count += 1;
        }
      },
      [](CrossEntropyStats& acc, const CrossEntropyStats& part) {
        acc.loss_sum += part.loss_sum, acc.correct += part.correct, acc.count += part.count;
      });
}

CrossEntropyStats cross_entropy_forward_reference(const float* logits, const int32_t* labels,
                                                  int64_t N, int64_t C) {
  CrossEntropyStats s;
  for (int64_t r = 0; r < N; ++r) {
    check_label(labels[r], r, C);
    if (labels[r] == kIgnoreLabel) continue;
    const float* x = logits + r * C;
    const int64_t arg = std::max_element(x, x + C) - x;
    const double mx = x[arg];
    double sum = 0;
    for (int64_t i = 0; i < C; ++i) sum += std::exp(double(x[i]) - mx);
    s.loss_sum += std::log(sum) + mx - x[labels[r]];
    s.correct += arg == labels[r];
    s.count += 1;
  }
  return s;
}

void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* labels, int64_t N,
                            int64_t C, float denominator) {
  const float inv = 1.f / denominator;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* x = logits + r * C;
    float* d = dlogits + r * C;
    if (labels[r] == kIgnoreLabel) {
      std::fill_n(d, C, 0.f);
      continue;
    }
    const auto row = Eigen::Map<const Eigen::ArrayXf>(x, C);
    auto out = Eigen::Map<Eigen::ArrayXf>(d, C);
    out = (row - row.maxCoeff()).exp();
    out *= inv / out.sum();
    d[labels[r]] -= inv;
  }
}

void cross_entropy_backward_reference(float* dlogits, const float* logits, const int32_t* labels,
                                      int64_t N, int64_t C, float denominator) {
  for (int64_t r = 0; r < N; ++r) {
    const float* x = logits + r * C;
    for (int64_t i = 0; i < C; ++i) dlogits[r * C + i] = 0.f;
    if (labels[r] == kIgnoreLabel) continue;
    const double mx = *std::max_element(x, x + C);
    double sum = 0;
    for (int64_t i = 0; i < C; ++i) sum += std::exp(double(x[i]) - mx);
    for (int64_t i = 0; i < C; ++i)
      dlogits[r * C + i] = static_cast<float>((std::exp(double(x[i]) - mx) / sum - (i == labels[r])) / denominator);
  }
}

}  // namespace bertlab::ops

// Lab 1's solution with planted bugs (tests/labs/planted.h).
#include "labs/profile/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::profile {

using planted::bug;

namespace {
constexpr double kF32 = 4;  // bytes per element
}

Cost linear(int64_t rows, int64_t K, int64_t N, bool residual, double activation_flops) {
  const double M = double(rows), out = M * double(N);
  double flops = 2 * M * double(N) * double(K) + out;
  if (residual) flops += out;
  flops += activation_flops * out;
  // Bug: the bias is not counted in the bytes.
  const double bias = bug("linear_forgets_bias_bytes") ? 0 : double(N);
  const double elements = M * double(K) + double(N) * double(K) + bias + out + (residual ? out : 0);
  return {flops, kF32 * elements};
}

Cost attention_scores(int64_t B, int64_t S, int64_t H, int64_t heads) {
  const double scores = double(B) * double(heads) * double(S) * double(S);
  const double head = double(H) / double(heads);
  const double flops = 2 * scores * head + 2 * scores;
  // Bug: all of qkv is read, values included.
  const double qkv_parts = bug("scores_read_all_of_qkv") ? 3.0 : 2.0;
  const double elements = qkv_parts * double(B) * double(S) * double(H) + double(B) * double(S) + scores;
  return {flops, kF32 * elements};
}

Cost layernorm(int64_t rows, int64_t H) {
  const double x = double(rows) * double(H);
  // Bug: gamma and beta are not counted.
  return {7 * x, kF32 * (2 * x + (bug("layernorm_forgets_gamma_beta") ? 0 : 2.0 * double(H)))};
}

Cost softmax(int64_t B, int64_t heads, int64_t S) {
  const double x = double(B) * double(heads) * double(S) * double(S);
  return {5 * x, kF32 * 2 * x};
}

Predictions predictions() {
  // Bug: one prediction wrong (bf16 changes the speed of a FLOP, not the count).
  if (bug("one_prediction_wrong")) return {Move::up, Move::up, Move::down, Move::up};
  // Bug: a crash (a null pointer read) before any prediction is made.
  if (bug("predictions_crash")) {
    volatile int* nowhere = nullptr;
    (void)*nowhere;
  }
  return {Move::up, Move::same, Move::down, Move::up};
}

}  // namespace bertlab::lab::profile

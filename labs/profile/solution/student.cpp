// Lab 1, the teachers' solution (labs/README.md: remove solution/ from the students' copy).
#include "labs/profile/lab.h"

namespace bertlab::lab::profile {

namespace {
constexpr double kF32 = 4;  // bytes per element
}

Cost linear(int64_t rows, int64_t K, int64_t N, bool residual, double activation_flops) {
  const double M = double(rows), out = M * double(N);
  double flops = 2 * M * double(N) * double(K) + out;  // GEMM and bias
  if (residual) flops += out;
  flops += activation_flops * out;
  const double elements = M * double(K) + double(N) * double(K) + double(N) + out + (residual ? out : 0);
  return {flops, kF32 * elements};
}

Cost attention_scores(int64_t B, int64_t S, int64_t H, int64_t heads) {
  const double scores = double(B) * double(heads) * double(S) * double(S);
  const double head = double(H) / double(heads);
  // One (S x head) * (head x S) GEMM per sequence and head, then scale and mask bias.
  const double flops = 2 * scores * head + 2 * scores;
  // Q and K: two thirds of qkv (B x S x 3H); the mask bias (B x S); the scores.
  const double elements = 2.0 * double(B) * double(S) * double(H) + double(B) * double(S) + scores;
  return {flops, kF32 * elements};
}

Cost layernorm(int64_t rows, int64_t H) {
  const double x = double(rows) * double(H);
  return {7 * x, kF32 * (2 * x + 2.0 * double(H))};
}

Cost softmax(int64_t B, int64_t heads, int64_t S) {
  const double x = double(B) * double(heads) * double(S) * double(S);
  return {5 * x, kF32 * 2 * x};
}

Predictions predictions() {
  // Attention's FLOPs grow with S^2 per sequence, the rest with S; bf16 changes the time of a
  // FLOP, not the count; the optimizer runs once per 4 micro-batches;
  // softmax's bytes grow with S^2 per sequence, most other bytes with S or not at all.
  return {Move::up, Move::same, Move::down, Move::up};
}

}  // namespace bertlab::lab::profile

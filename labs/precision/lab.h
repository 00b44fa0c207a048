#pragma once
// Lab 4: the functions you write in labs/precision/student.cpp.
#include <cstddef>
#include <cstdint>

namespace bertlab::lab::precision {

// bf16 keeps the sign, the 8 exponent bits and the top 7 mantissa bits of an IEEE float: the
// upper 16 bits of its bit pattern. float_to_bf16 returns the bf16 bit pattern nearest to x,
// ties to the pattern whose last bit is 0 (round to nearest even, as oneDNN and PyTorch do).
// Infinities stay infinities; a NaN gives a quiet NaN with the same sign (its top 16 bits with
// the quiet bit, 0x0040, set). Finite values that round past the largest bf16 become infinity.
uint16_t float_to_bf16(float x);
// The float with the same value (exact: every bf16 is a float).
float bf16_to_float(uint16_t b);

// Dynamic loss scaling, with the rules of PyTorch's torch.cuda.amp.GradScaler.
struct LossScaler {
  float scale = 65536.0f;  // the loss is multiplied by this before backward
  float growth_factor = 2.0f, backoff_factor = 0.5f;
  int growth_interval = 2000;  // good steps in a row before the scale grows
  int good_steps = 0;          // good steps since the last overflow or growth
};
// Unscales each of the n gradients in place, as GradScaler does: multiplies it by the reciprocal
// 1 / scale (computed once). Returns true if every result is finite.
bool unscale_gradients(float* grads, size_t n, float scale);
// Called once per step after unscaling, with whether the gradients were all finite. Returns
// whether the optimizer may apply this step. An overflow skips the step, multiplies the scale
// by backoff_factor and restarts the count; the growth_interval-th good step in a row
// multiplies the scale by growth_factor and restarts the count.
bool update_scale(LossScaler& s, bool grads_finite);

}  // namespace bertlab::lab::precision

// Lab 4, a solution for teachers.
#include <cmath>
#include <cstring>

#include "labs/precision/lab.h"

namespace bertlab::lab::precision {

uint16_t float_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // keep sign, make it quiet
  // Add half of the dropped part's range, minus one unless the kept part is odd: ties go to even.
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

bool unscale_gradients(float* grads, size_t n, float scale) {
  const float inv = 1.0f / scale;  // GradScaler multiplies by the reciprocal
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    grads[i] *= inv;
    finite = finite && std::isfinite(grads[i]);
  }
  return finite;
}

bool update_scale(LossScaler& s, bool grads_finite) {
  if (!grads_finite) {
    s.scale *= s.backoff_factor;
    s.good_steps = 0;
    return false;
  }
  if (++s.good_steps == s.growth_interval) {
    s.scale *= s.growth_factor;
    s.good_steps = 0;
  }
  return true;
}

}  // namespace bertlab::lab::precision

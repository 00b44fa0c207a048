// Lab 4's solution with planted bugs (tests/labs/planted.h).
#include <cmath>
#include <cstring>

#include "labs/precision/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::precision {

using planted::bug;

uint16_t float_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Bug: ties round up (away from zero in magnitude) instead of to even.
  const uint32_t lsb = bug("ties_away_from_even") ? 1u : (bits >> 16) & 1u;
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
  const float inv = 1.0f / scale;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    grads[i] *= inv;
    finite = finite && std::isfinite(grads[i]);
    // Bug: stops at the first infinity, leaving the gradients after it scaled.
    if (!finite && bug("unscale_stops_at_first_inf")) return false;
  }
  return finite;
}

bool update_scale(LossScaler& s, bool grads_finite) {
  if (!grads_finite) {
    s.scale *= s.backoff_factor;
    // Bug: the count of good steps survives an overflow.
    if (!bug("overflow_keeps_good_steps")) s.good_steps = 0;
    return false;
  }
  if (++s.good_steps == s.growth_interval) {
    s.scale *= s.growth_factor;
    s.good_steps = 0;
  }
  return true;
}

}  // namespace bertlab::lab::precision

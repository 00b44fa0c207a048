// Lab 2's solution with planted bugs (tests/labs/planted.h).
#include <cmath>
#include <vector>

#include "labs/kernel/lab.h"
#include "tests/labs/planted.h"

namespace bertlab::lab::kernel {

using planted::bug;

namespace {

struct RowStats {
  double mean, rstd;
};

RowStats row_stats(const float* x, int64_t H, float eps) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < H; ++i) sum += x[i];
  const double mean = sum / H;
  for (int64_t i = 0; i < H; ++i) sq += (x[i] - mean) * (x[i] - mean);
  return {mean, 1.0 / std::sqrt(sq / H + eps)};
}

// The forward's own statistics, written again in the forward (as a student might), with its bugs.
RowStats forward_stats(const float* x, int64_t H, float eps) {
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < H; ++i) sum += x[i];
  const double mean = sum / H;
  for (int64_t i = 0; i < H; ++i) sq += (x[i] - mean) * (x[i] - mean);
  // Bug: the unbiased variance (divides by H - 1).
  const double var = sq / (bug("forward_unbiased_variance") ? H - 1 : H);
  // Bug: eps added outside the square root.
  if (bug("forward_eps_outside_sqrt")) return {mean, 1.0 / (std::sqrt(var) + eps)};
  return {mean, 1.0 / std::sqrt(var + eps)};
}

}  // namespace

void layernorm_forward(float* y, const float* x, const float* gamma, const float* beta, int64_t rows, int64_t H,
                       float eps) {
  // Bug: a loop unrolled by 16 with no remainder loop (fine while H is a multiple of 16).
  const int64_t end = bug("forward_drops_tail") ? H / 16 * 16 : H;
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * H;
    const RowStats s = forward_stats(xr, H, eps);
    for (int64_t i = 0; i < end; ++i) y[r * H + i] = static_cast<float>((xr[i] - s.mean) * s.rstd * gamma[i] + beta[i]);
  }
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                        int64_t rows, int64_t H, float eps) {
  std::vector<double> dg(H, 0.0), db(H, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * H, *dyr = dy + r * H;
    const RowStats s = row_stats(xr, H, eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t i = 0; i < H; ++i) {
      const double xhat = (xr[i] - s.mean) * s.rstd, g = double(dyr[i]) * gamma[i];
      mean_g += g;
      mean_gx += g * xhat;
      dg[i] += dyr[i] * xhat;
      db[i] += dyr[i];
    }
    mean_g /= H;
    mean_gx /= H;
    for (int64_t i = 0; i < H; ++i) {
      const double xhat = (xr[i] - s.mean) * s.rstd, g = double(dyr[i]) * gamma[i];
      dx[r * H + i] = static_cast<float>(s.rstd * (g - mean_g - xhat * mean_gx));
    }
  }
  // Bug: dgamma and dbeta are overwritten, not added to.
  const bool overwrite = bug("backward_overwrites_dgamma_dbeta");
  for (int64_t i = 0; i < H; ++i) {
    dgamma[i] = static_cast<float>(dg[i]) + (overwrite ? 0.0f : dgamma[i]);
    dbeta[i] = static_cast<float>(db[i]) + (overwrite ? 0.0f : dbeta[i]);
  }
}

}  // namespace bertlab::lab::kernel

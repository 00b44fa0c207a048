#include "ops/optimizer.h"

#include "ops/parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace bertlab::ops {

namespace {
// The sum of squares of g[begin, end) added to `part`. Not inlined: the per-tensor and the fused
// norm run the very same vector code on the same ranges, so their partial sums are bit-identical.
[[gnu::noinline]] void add_squares(const float* g, int64_t begin, int64_t end, double& part) {
  double acc = part;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = begin; i < end; ++i) acc += double(g[i]) * g[i];
  part = acc;
}
}  // namespace

double sum_of_squares(const float* g, int64_t n) {
  return ordered_reduce(
      n, 0.0, [&](int64_t begin, int64_t end, double& part) { add_squares(g, begin, end, part); },
      [](double& acc, double part) { acc += part; });
}

double sum_of_squares_fused(const std::vector<std::pair<const float*, int64_t>>& tensors) {
  const int threads = std::clamp(omp_get_max_threads(), 1, kMaxReduceThreads);
  const size_t count = tensors.size();
  // parts[s * threads + t]: thread t's sum over its ordered_reduce chunk of tensor s.
  std::vector<double> parts(count * threads, 0.0);
  int used = threads;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single nowait
    used = nt;
    for (size_t s = 0; s < count; ++s) {
      int64_t begin, end;
      thread_chunk(tensors[s].second, t, nt, begin, end);
      add_squares(tensors[s].first, begin, end, parts[s * threads + t]);
    }
  }
  // Folded as sum_of_squares folds each tensor's partials (thread order), then tensor by tensor.
  double total = 0;
  for (size_t s = 0; s < count; ++s) {
    double sum = 0;
    for (int t = 0; t < used; ++t) sum += parts[s * threads + t];
    total += sum;
  }
  return total;
}

namespace {
struct Corrections {
  float c1, c2;  // 1 / (1 - beta^t)
};
Corrections corrections(const AdamHyper& h) {
  return {static_cast<float>(1.0 / (1.0 - std::pow(double(h.beta1), double(h.step)))),
          static_cast<float>(1.0 / (1.0 - std::pow(double(h.beta2), double(h.step))))};
}
}  // namespace

void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h,
                  bool decay) {
  // Plain variables, not a structured binding: clang 14 cannot capture one in an OpenMP region.
  const Corrections cs = corrections(h);
  const float c1 = cs.c1, c2 = cs.c2;
  const float b1 = h.beta1, b2 = h.beta2, s = h.grad_scale, lr = h.lr, eps = h.eps;
  const float keep = decay ? 1.f - h.lr * h.weight_decay : 1.f;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * s;
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    p[i] = p[i] * keep - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
  }
}

void adamw_update_fused(const std::vector<AdamSegment>& segments, const AdamHyper& h) {
  const Corrections cs = corrections(h);
  const float c1 = cs.c1, c2 = cs.c2;
  const float b1 = h.beta1, b2 = h.beta2, s = h.grad_scale, lr = h.lr, eps = h.eps;
  const float keep_decay = 1.f - h.lr * h.weight_decay;
  // first[k]: index of segment k's first element in the concatenation of all segments.
  std::vector<int64_t> first(segments.size() + 1, 0);
  for (size_t k = 0; k < segments.size(); ++k) first[k + 1] = first[k] + segments[k].n;
  const int64_t total = first.back();
  // Blocks of kBlock elements handed out dynamically: on a machine shared with other processes a
  // thread that loses its core for a while no longer holds up the others at the end of a static
  // split. Element-wise arithmetic, so the split does not change any result.
  constexpr int64_t kBlock = int64_t(1) << 16;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(total, begin + kBlock);
    // The segment holding `begin`, then walk forward until `end`.
    size_t k = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), begin) - first.begin()) - 1;
    for (int64_t at = begin; at < end; ++k) {
      const AdamSegment& sg = segments[k];
      const int64_t lo = at - first[k], hi = std::min(end, first[k + 1]) - first[k];
      float *p = sg.p, *m = sg.m, *v = sg.v;
      const float* g = sg.g;
      const float keep = sg.decay ? keep_decay : 1.f;
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        const float gi = g[i] * s;
        m[i] = b1 * m[i] + (1.f - b1) * gi;
        v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
        p[i] = p[i] * keep - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      }
      at = first[k] + hi;
    }
  }
}

void adamw_update_reference(float* p, float* m, float* v, const float* g, int64_t n,
                            const AdamHyper& h, bool decay) {
  const double c1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double c2 = 1.0 - std::pow(double(h.beta2), double(h.step));
  for (int64_t i = 0; i < n; ++i) {
    const double gi = double(g[i]) * h.grad_scale;
    m[i] = float(h.beta1 * double(m[i]) + (1.0 - h.beta1) * gi);
    v[i] = float(h.beta2 * double(v[i]) + (1.0 - h.beta2) * gi * gi);
    double pi = p[i];
    if (decay) pi *= 1.0 - double(h.lr) * h.weight_decay;
    p[i] = float(pi - h.lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + h.eps));
  }
}

namespace {
// LAMB's constants for one step: bias corrections, betas, clipping scale, epsilon.
struct LambConsts {
  float c1, c2, b1, b2, s, eps;
};
LambConsts lamb_consts(const AdamHyper& h) {
  const Corrections cs = corrections(h);
  return {cs.c1, cs.c2, h.beta1, h.beta2, h.grad_scale, h.eps};
}

// LAMB pass 1 on [begin, end) of one tensor: the new moments, and the squared norms of the
// parameter and of the update direction over the range. The per-tensor and the fused update
// both call this on the same ranges, so their partial sums, hence results, are bit-identical.
inline void lamb_moments(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end,
                         const LambConsts k, float wd, double& p_norm2, double& u_norm2) {
  const float c1 = k.c1, c2 = k.c2, b1 = k.b1, b2 = k.b2, s = k.s, eps = k.eps;
  double pp = 0, uu = 0;
#pragma omp simd reduction(+ : pp, uu)
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i] * s;
    m[i] = b1 * m[i] + (1.f - b1) * gi;
    v[i] = b2 * v[i] + (1.f - b2) * gi * gi;
    const float u = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + wd * p[i];
    pp += double(p[i]) * p[i];
    uu += double(u) * u;
  }
  p_norm2 += pp, u_norm2 += uu;
}

// LAMB pass 2 on [begin, end): the update, recomputed from the new moments (no temporary buffer).
inline void lamb_apply(float* p, const float* m, const float* v, int64_t begin, int64_t end, const LambConsts k,
                       float wd, float step) {
  const float c1 = k.c1, c2 = k.c2, eps = k.eps;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float u = (m[i] * c1) / (std::sqrt(v[i] * c2) + eps) + wd * p[i];
    p[i] -= step * u;
  }
}

// The step of one tensor from its squared norms: lr x the trust ratio |p| / |u| (1 when either is 0).
float lamb_step(const AdamHyper& h, double p_norm2, double u_norm2) {
  const double pn = std::sqrt(p_norm2), un = std::sqrt(u_norm2);
  return h.lr * static_cast<float>(pn > 0 && un > 0 ? pn / un : 1.0);
}

void lamb_update_tensor(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h,
                        bool decay) {
  const LambConsts k = lamb_consts(h);
  const float wd = decay ? h.weight_decay : 0.f;
  struct Norms {
    double p = 0, u = 0;
  };
  const Norms norms = ordered_reduce(
      n, Norms{}, [&](int64_t begin, int64_t end, Norms& part) { lamb_moments(p, m, v, g, begin, end, k, wd, part.p, part.u); },
      [](Norms& acc, const Norms& part) { acc.p += part.p, acc.u += part.u; });
  const float step = lamb_step(h, norms.p, norms.u);
  const int threads = std::max(1, omp_get_max_threads());
  for_each_thread_chunk(n, threads, [&](int, int64_t begin, int64_t end) { lamb_apply(p, m, v, begin, end, k, wd, step); });
}
}  // namespace

void lamb_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h,
                 bool decay, int segments) {
  const int64_t part = n / segments;
  for (int s = 0; s < segments; ++s)
    lamb_update_tensor(p + s * part, m + s * part, v + s * part, g + s * part, part, h, decay);
}

void lamb_update_fused(const std::vector<AdamSegment>& segments, const AdamHyper& h) {
  const LambConsts k = lamb_consts(h);
  const int threads = std::clamp(omp_get_max_threads(), 1, kMaxReduceThreads);
  const size_t count = segments.size();
  // Squared norms per (segment, thread): thread t reduces its fixed chunk of every segment, the
  // chunk ordered_reduce gives it in lamb_update_tensor, and the partials are folded in thread order.
  std::vector<double> parts(2 * count * threads, 0.0);
  std::vector<float> steps(count);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (size_t s = 0; s < count; ++s) {
      const AdamSegment& sg = segments[s];
      int64_t begin, end;
      thread_chunk(sg.n, t, nt, begin, end);
      lamb_moments(sg.p, sg.m, sg.v, sg.g, begin, end, k, sg.decay ? h.weight_decay : 0.f, parts[2 * (s * threads + t)],
                   parts[2 * (s * threads + t) + 1]);
    }
#pragma omp barrier
#pragma omp single
    for (size_t s = 0; s < count; ++s) {
      double p_norm2 = 0, u_norm2 = 0;
      for (int u = 0; u < nt; ++u) p_norm2 += parts[2 * (s * threads + u)], u_norm2 += parts[2 * (s * threads + u) + 1];
      steps[s] = lamb_step(h, p_norm2, u_norm2);
    }
    // (the single's implicit barrier: every step is known before any parameter changes)
    for (size_t s = 0; s < count; ++s) {
      const AdamSegment& sg = segments[s];
      int64_t begin, end;
      thread_chunk(sg.n, t, nt, begin, end);
      lamb_apply(sg.p, sg.m, sg.v, begin, end, k, sg.decay ? h.weight_decay : 0.f, steps[s]);
    }
  }
}

void lamb_update_reference(float* p, float* m, float* v, const float* g, int64_t n,
                           const AdamHyper& h, bool decay) {
  const double c1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double c2 = 1.0 - std::pow(double(h.beta2), double(h.step));
  std::vector<double> u(n);
  double pn = 0, un = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = double(g[i]) * h.grad_scale;
    m[i] = float(h.beta1 * double(m[i]) + (1.0 - h.beta1) * gi);
    v[i] = float(h.beta2 * double(v[i]) + (1.0 - h.beta2) * gi * gi);
    u[i] = (m[i] / c1) / (std::sqrt(v[i] / c2) + h.eps) + (decay ? h.weight_decay * double(p[i]) : 0.0);
    pn += double(p[i]) * p[i];
    un += u[i] * u[i];
  }
  pn = std::sqrt(pn), un = std::sqrt(un);
  const double trust = pn > 0 && un > 0 ? pn / un : 1.0;
  for (int64_t i = 0; i < n; ++i) p[i] = float(p[i] - h.lr * trust * u[i]);
}

}  // namespace bertlab::ops

#pragma once
// Reductions whose result does not depend on thread scheduling: each thread reduces its fixed
// chunk of [0, n) into its own partial, and the partials are combined in thread order. (An
// OpenMP reduction clause or a critical section combines in arrival order, which changes the
// rounding from run to run and breaks bit-exact resume.)
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace bertlab::ops {

// body(begin, end, partial) reduces [begin, end) into partial (a copy of `init`);
// combine(acc, partial) folds the partials, thread 0 first.
template <typename T, typename Body, typename Combine>
T ordered_reduce(int64_t n, const T& init, Body body, Combine combine) {
  const int threads = std::max(1, omp_get_max_threads());
  std::vector<T> parts(threads, init);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(n, t * chunk), end = std::min<int64_t>(n, begin + chunk);
    body(begin, end, parts[t]);
  }
  T acc = init;
  for (auto& p : parts) combine(acc, p);
  return acc;
}

// Element-wise sum of per-thread vectors into `out` (+=), thread order.
inline void add_into(float* out, const std::vector<float>& part) {
  for (size_t i = 0; i < part.size(); ++i) out[i] += part[i];
}

}  // namespace bertlab::ops

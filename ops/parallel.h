#pragma once
// Reductions whose result does not depend on thread scheduling: each thread reduces its fixed
// chunk of [0, n) into its own partial, and the partials are combined in thread order. (An
// OpenMP reduction clause or a critical section combines in arrival order, which changes the
// rounding from run to run and breaks bit-exact resume.) Neither allocates per call.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace bertlab::ops {

inline constexpr int kMaxReduceThreads = 256;

// The fixed chunk [begin, end) of [0, n) that thread t of nt owns.
inline void thread_chunk(int64_t n, int t, int nt, int64_t& begin, int64_t& end) {
  const int64_t chunk = (n + nt - 1) / nt;
  begin = std::min<int64_t>(n, t * chunk);
  end = std::min<int64_t>(n, begin + chunk);
}

// Runs f(t, begin, end) on `threads` OpenMP threads, thread t on its chunk of [0, n); returns
// the number of threads the runtime gave (chunks beyond it are not run).
template <typename F>
int for_each_thread_chunk(int64_t n, int threads, F f) {
  int used = threads;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single
    used = nt;
    int64_t begin, end;
    thread_chunk(n, t, nt, begin, end);
    f(t, begin, end);
  }
  return used;
}

// body(begin, end, partial) reduces [begin, end) into partial (a copy of `init`);
// combine(acc, partial) folds the partials, thread 0 first. T is small (a few scalars).
template <typename T, typename Body, typename Combine>
T ordered_reduce(int64_t n, const T& init, Body body, Combine combine) {
  const int threads = std::clamp(omp_get_max_threads(), 1, kMaxReduceThreads);
  std::array<T, kMaxReduceThreads> parts;
  std::fill_n(parts.begin(), threads, init);
  const int used = for_each_thread_chunk(n, threads, [&](int t, int64_t begin, int64_t end) { body(begin, end, parts[t]); });
  T acc = init;
  for (int t = 0; t < used; ++t) combine(acc, parts[t]);
  return acc;
}

// Sums rows of `width` floats: body(begin, end, part) adds the rows [begin, end) of its chunk
// into part (zeroed, width floats); fold(part) then receives the per-thread parts in thread
// order. `scratch` holds the parts and grows only when the thread count or width does.
// row_sum_parts and fold_row_sum_parts are its two halves, for a fold in a later call (the
// parts stay in `scratch`, thread t's at t * width; row_sum_parts returns how many ran).
template <typename Body>
int row_sum_parts(int64_t n, int64_t width, std::vector<float>& scratch, Body body) {
  const int threads = std::max(1, omp_get_max_threads());
  if (scratch.size() < static_cast<size_t>(threads * width)) scratch.resize(threads * width);
  std::fill_n(scratch.begin(), threads * width, 0.f);
  float* parts = scratch.data();
  return for_each_thread_chunk(n, threads, [&](int t, int64_t begin, int64_t end) { body(begin, end, parts + t * width); });
}

template <typename Fold>
void fold_row_sum_parts(int used, int64_t width, const std::vector<float>& scratch, Fold fold) {
  for (int t = 0; t < used; ++t) fold(scratch.data() + t * width);
}

template <typename Body, typename Fold>
void ordered_row_sums(int64_t n, int64_t width, std::vector<float>& scratch, Body body, Fold fold) {
  fold_row_sum_parts(row_sum_parts(n, width, scratch, body), width, scratch, fold);
}

// part[j] += row[j]: the column sums of the bias gradients (one loop, so that every caller
// rounds alike).
inline void add_row(float* part, const float* row, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) part[j] += row[j];
}

}  // namespace bertlab::ops

#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/bf16.h"
#include "ops/dnnl_context.h"
#include "ops/isa.h"
#include "ops/normalization.h"
#include "base/error.h"

namespace bertlab::ops {

using dnnl::memory;

void activation_forward_reference(float* y, const float* x, int64_t n, Activation act) {
  const auto f = activation_info(act).reference;
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(f(x[i]));
}

ActivationOp::ActivationOp(int64_t n, Activation act) {
  check(act != Activation::none, "activation op needs an activation, got none");
  auto& ctx = dnnl_context();
  const ActivationInfo& a = activation_info(act);
  memory::desc data({n}, memory::data_type::f32, memory::format_tag::a);
  pd_ = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, a.forward_alg, data, a.alpha, a.beta),
      scratchpad_attr(), ctx.engine);
  prim_ = dnnl::eltwise_forward(pd_);
}

void ActivationOp::forward(float* y, const float* x) const {
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), x}, {DNNL_ARG_DST, pd_.dst_desc(), y}});
}

void add_forward(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void add_forward_reference(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void scale_forward(float* y, const float* x, float alpha, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

void mul_forward(float* y, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void mul_forward_reference(float* y, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void mask_bias_forward(float* bias, const int32_t* mask, int64_t n) {
  const float drop = std::numeric_limits<float>::lowest();
  for (int64_t i = 0; i < n; ++i) bias[i] = mask[i] != 0 ? 0.f : drop;
}

void first_token_forward(float* y, const float* x, int64_t B, int64_t S, int64_t H) {
  for (int64_t b = 0; b < B; ++b) std::memcpy(y + b * H, x + b * S * H, H * sizeof(float));
}

}  // namespace bertlab::ops

namespace bertlab::ops {

void activation_backward_reference(float* dx, const float* dy, const float* v, int64_t n,
                                   Activation act) {
  const auto d = activation_info(act).derivative;  // of x, or of y when grad_from_output
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<float>(dy[i] * d(v[i]));
}

ActivationGrad::ActivationGrad(int64_t n, Activation act) {
  check(act != Activation::none, "activation gradient needs an activation, got none");
  auto& ctx = dnnl_context();
  memory::desc data({n}, memory::data_type::f32, memory::format_tag::a);
  const ActivationInfo& a = activation_info(act);
  dnnl::eltwise_forward::primitive_desc hint(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, a.backward_alg, data, a.alpha, a.beta),
      ctx.engine);
  pd_ = dnnl::eltwise_backward::primitive_desc(
      dnnl::eltwise_backward::desc(a.backward_alg, data, data, a.alpha, a.beta), scratchpad_attr(), ctx.engine, hint);
  prim_ = dnnl::eltwise_backward(pd_);
}

void ActivationGrad::forward(float* dx, const float* dy, const float* v) const {
  const bool use_dst = pd_.src_desc().is_zero();
  args_.execute(prim_, {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, pd_.diff_dst_desc(), v},
                        {DNNL_ARG_DIFF_DST, pd_.diff_dst_desc(), dy},
                        {DNNL_ARG_DIFF_SRC, pd_.diff_src_desc(), dx}});
}

namespace {
// splitmix64 finaliser: a strong 64-bit mix, cheap enough to run per element.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t stream_key(uint64_t salt, DropoutKey k) {
  return mix64(mix64(mix64(mix64(k.seed) ^ k.step) ^ k.micro) ^ salt);
}
inline uint32_t keep_threshold(float p) {
  return static_cast<uint32_t>(std::min(4294967295.0, double(p) * 4294967296.0));
}
// Whether element i of the stream `base` is kept: the mask of dropout_forward, its backward and
// dropout_softmax_backward.
inline bool kept(uint64_t base, uint64_t i, uint32_t threshold) {
  return static_cast<uint32_t>(mix64(base + i) >> 32) >= threshold;
}
}  // namespace

bool dropout_keeps(int64_t i, float p, uint64_t salt, DropoutKey key) {
  return kept(stream_key(salt, key), uint64_t(i), keep_threshold(p));
}

namespace {
// The mask's hash multiplies 64-bit integers: AVX-512 DQ has a vector instruction for that, AVX2
// has none, so the loops vectorise only with it. Each loop is compiled twice, for the build's
// baseline and with AVX-512 (a target attribute: the OpenMP body inherits it), and chosen by the
// ISA level in force (ops/isa.h), so the cap reaches it. Same source, same bits.
#define BERTLAB_DROPOUT_LOOPS(SUFFIX, ATTR)                                                                \
  ATTR void dropout_loop_##SUFFIX(float* y, const float* x, int64_t n, uint64_t base, uint32_t threshold,  \
                                  float scale) {                                                           \
    _Pragma("omp parallel for simd schedule(static)") for (int64_t i = 0; i < n; ++i) y[i] =               \
        kept(base, uint64_t(i), threshold) ? x[i] * scale : 0.f;                                           \
  }                                                                                                        \
  ATTR void dropout_add_loop_##SUFFIX(float* y, const float* x, const float* r, int64_t n, uint64_t base,  \
                                      uint32_t threshold, float scale) {                                   \
    _Pragma("omp parallel for simd schedule(static)") for (int64_t i = 0; i < n; ++i) {                    \
      const float dropped = kept(base, uint64_t(i), threshold) ? x[i] * scale : 0.f;                       \
      y[i] = dropped + r[i];                                                                               \
    }                                                                                                      \
  }
BERTLAB_DROPOUT_LOOPS(portable, )
#if defined(__x86_64__)
BERTLAB_DROPOUT_LOOPS(avx512, __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))))
#endif
#undef BERTLAB_DROPOUT_LOOPS

#if defined(__x86_64__)
bool use_avx512() {
  static const bool yes = active_isa() >= Isa::avx512_core;  // the level is fixed for the process
  return yes;
}
#endif
}  // namespace

void dropout_forward(float* y, const float* x, int64_t n, float p, uint64_t salt, DropoutKey key) {
  const uint64_t base = stream_key(salt, key);
  const uint32_t threshold = keep_threshold(p);
  const float scale = 1.f / (1.f - p);
#if defined(__x86_64__)
  if (use_avx512()) return dropout_loop_avx512(y, x, n, base, threshold, scale);
#endif
  dropout_loop_portable(y, x, n, base, threshold, scale);
}

void dropout_forward_bf16(uint16_t* y, const float* x, int64_t n, float p, uint64_t salt, DropoutKey key) {
  check(reinterpret_cast<const std::byte*>(y) + 2 * n <= reinterpret_cast<const std::byte*>(x) ||
            reinterpret_cast<const std::byte*>(x) + 4 * n <= reinterpret_cast<const std::byte*>(y),
        "dropout_forward_bf16: the output overlaps the input");
  const uint64_t base = stream_key(salt, key);
  const uint32_t threshold = keep_threshold(p);
  const float scale = 1.f / (1.f - p);
  constexpr int64_t kChunk = 2048;  // f32 values per chunk, rounded into y in one vector pass
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    float buf[kChunk];
    const int64_t len = std::min(kChunk, n - c);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) buf[i] = kept(base, uint64_t(c + i), threshold) ? x[c + i] * scale : 0.f;
    cast_to_bf16(y + c, buf, len);
  }
}

void dropout_add_forward(float* y, const float* x, const float* r, int64_t n, float p, uint64_t salt,
                         DropoutKey key) {
  const uint64_t base = stream_key(salt, key);
  const uint32_t threshold = keep_threshold(p);
  const float scale = 1.f / (1.f - p);
#if defined(__x86_64__)
  if (use_avx512()) return dropout_add_loop_avx512(y, x, r, n, base, threshold, scale);
#endif
  dropout_add_loop_portable(y, x, r, n, base, threshold, scale);
}

void dropout_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t L, float p,
                              uint64_t salt, DropoutKey key) {
  const uint64_t base = stream_key(salt, key);
  const uint32_t threshold = keep_threshold(p);
  const float scale = 1.f / (1.f - p);
  // Per thread: the dropped-out row of dy, then the softmax backward of that row.
  thread_local std::vector<float> row;
#pragma omp parallel
  {
    if (static_cast<int64_t>(row.size()) < L) row.resize(static_cast<size_t>(L));
    float* g = row.data();
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * L;
      const uint64_t first = base + uint64_t(r * L);
#pragma omp simd
      for (int64_t i = 0; i < L; ++i) {
        g[i] = kept(first, uint64_t(i), threshold) ? dyr[i] * scale : 0.f;
      }
      softmax_backward_row(dx + r * L, g, y + r * L, L);
    }
  }
}

}  // namespace bertlab::ops

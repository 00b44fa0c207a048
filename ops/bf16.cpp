#include "ops/bf16.h"

#include <array>
#include <bit>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "base/buffer.h"
#include "base/error.h"
#include "ops/parallel.h"

namespace bertlab::ops {

// Per slot and thread: all GEMMs of a thread run one after another.
std::byte* gemm_scratch(int slot, size_t bytes) {
  thread_local std::array<AlignedBuffer<std::byte>, kScratchSlots> slots;
  auto& s = slots.at(static_cast<size_t>(slot));
  if (s.size() < bytes) s = AlignedBuffer<std::byte>(bytes);
  return s.data();
}

namespace {

using dnnl::memory;

// Dense bf16 layout of `view`'s dims: batch dims outermost in order, the last two dims in the
// order of their strides in the view (row-major, or transposed when the view is a transpose).
memory::desc dense_bf16(const memory::desc& view) {
  const memory::dims dims = view.dims();
  const auto n = dims.size();
  check(n >= 2, "bf16 GEMM input: need at least 2 dims, got {}", n);
  const auto& s = view.data.format_desc.blocking.strides;
  const bool transposed = s[n - 2] < s[n - 1];  // the row index moves fastest
  memory::dims strides(n);
  const size_t inner = transposed ? n - 2 : n - 1, outer = transposed ? n - 1 : n - 2;
  strides[inner] = 1;
  strides[outer] = dims[inner];
  int64_t batch_stride = dims[n - 2] * dims[n - 1];
  for (size_t i = n - 2; i-- > 0;) {
    strides[i] = batch_stride;
    batch_stride *= dims[i];
  }
  return memory::desc(dims, memory::data_type::bf16, strides);
}

}  // namespace

GemmInput::GemmInput(const memory::desc& view, bool bf16, int slot, bool pack)
    : view_(view), copies_(bf16 || pack), slot_(slot) {
  check((slot >= 0 && slot < kInputSlots) || slot == kSharedDySlot, "GEMM input: bad scratch slot {}", slot);
  if (pack) {
    copy_ = memory::desc(view.dims(), bf16 ? memory::data_type::bf16 : memory::data_type::f32, memory::format_tag::any);
    return;
  }
  if (bf16) choose(dense_bf16(view));
}

void GemmInput::choose(const memory::desc& chosen) {
  check(copies_, "GEMM input: choose() on an f32 input, which is read in place");
  copy_ = chosen;
  auto& ctx = dnnl_context();
  convert_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, view_, ctx.engine, copy_, scratchpad_attr()));
  gemm_scratch(slot_, copy_.get_size());
}

const void* GemmInput::operator()(const float* base) const {
  if (!copies_) return base;
  std::byte* copy = gemm_scratch(slot_, copy_.get_size());
  convert_into(base, copy);
  return copy;
}

void GemmInput::convert_into(const float* base, void* dst) const {
  check(copies_, "GEMM input: convert_into() on an f32 input, which is read in place");
  check(static_cast<bool>(convert_), "GEMM input: packed input used before choose()");
  args_.execute(convert_, {{DNNL_ARG_FROM, view_, base}, {DNNL_ARG_TO, copy_, dst}});
}

uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);     // denormal: +-0
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

void cast_to_bf16(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
#if defined(__x86_64__) && defined(__AVX512BF16__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
#endif
  for (; i < n; ++i) dst[i] = to_bf16(src[i]);
}

SharedDySums& shared_dy_sums() {
  thread_local SharedDySums sums;
  return sums;
}

void cast_rows_summing_columns(uint16_t* dst, const float* src, int64_t rows, int64_t width, SharedDySums& sums) {
  sums.used = row_sum_parts(rows, width, sums.parts, [&](int64_t begin, int64_t end, float* part) {
    for (int64_t i = begin; i < end; ++i) {
      cast_to_bf16(dst + i * width, src + i * width, width);
      add_row(part, src + i * width, width);
    }
  });
  sums.rows = rows;
  sums.width = width;
}

void cast_rows_to_bf16(std::initializer_list<Bf16Rows> jobs) {
  check(jobs.size() <= 4, "cast_rows_to_bf16: at most 4 jobs, got {}", jobs.size());
  std::array<Bf16Rows, 4> job{};
  std::array<int64_t, 5> first{};  // first[j]: the global index of job j's first row
  size_t n = 0;
  for (const Bf16Rows& j : jobs) {
    job[n] = j;
    first[n + 1] = first[n] + j.rows;
    ++n;
  }
  const int64_t total = first[n];
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < total; ++r) {
    size_t j = 0;
    while (r >= first[j + 1]) ++j;
    const Bf16Rows& b = job[j];
    const int64_t i = r - first[j];
    // n values from element `at` of row i into dst.
    auto row = [&](uint16_t* dst, int64_t at, int64_t n) {
      if (b.src16) std::memcpy(dst, b.src16 + i * b.stride + at, size_t(n) * sizeof(uint16_t));
      else cast_to_bf16(dst, b.src + i * b.stride + at, n);
    };
    if (b.head == 0) {
      row(b.dst + i * b.width, 0, b.width);
      continue;
    }
    const int64_t heads = b.width / b.head;
    for (int64_t g = 0; g < heads; ++g) row(b.dst + head_major_at(i, g, heads, b.seq, b.head), g * b.head, b.head);
  }
}

}  // namespace bertlab::ops

#include "ops/bf16.h"

#include <array>

#include "base/buffer.h"
#include "base/error.h"

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

GemmInput::GemmInput(const memory::desc& view, bool bf16, int slot) : view_(view), bf16_(bf16), slot_(slot) {
  check(slot >= 0 && slot < kInputSlots, "GEMM input: bad scratch slot {}", slot);
  if (!bf16) return;
  dense_ = dense_bf16(view);
  auto& ctx = dnnl_context();
  convert_ = dnnl::reorder(dnnl::reorder::primitive_desc(ctx.engine, view_, ctx.engine, dense_));
  gemm_scratch(slot, dense_.get_size());
}

const void* GemmInput::operator()(const float* base) const {
  if (!bf16_) return base;
  std::byte* copy = gemm_scratch(slot_, dense_.get_size());
  args_.execute(convert_, {{DNNL_ARG_FROM, view_, base}, {DNNL_ARG_TO, dense_, copy}});
  return copy;
}

}  // namespace bertlab::ops

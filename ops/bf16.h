#pragma once
// GEMM inputs in f32 or bf16 (mixed precision, as PyTorch's CPU autocast runs matmuls): in bf16
// an f32 input is rounded to bf16 (nearest even, by a oneDNN reorder) into a dense copy in
// per-thread scratch just before the matmul, which accumulates in f32 and writes f32.
// Everything outside GEMMs stays f32.
#include <cstdint>
#include <initializer_list>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/dnnl_context.h"

namespace bertlab::ops {

// One input of a GEMM: `view` describes it in its f32 buffer (possibly strided: a head of the
// fused QKV, a transpose). In f32 the matmul reads the view in place. In bf16 the view is
// gathered into a dense bf16 copy, batch dimensions outermost and the last two in the view's
// order, which oneDNN's AMX/AVX-512 bf16 kernels take (strided bf16 views fall back to a slow
// GEMM). Copies live in scratch slot `slot` (0 or 1: the two inputs of one GEMM) of the calling
// thread, shared by every GEMM it runs and grown at construction, so a call allocates nothing.
// Packed (`pack`): the matmul picks B's layout (format_tag::any, f32 or bf16) and the view is
// reordered into it before each call; pass the primitive's weights desc to choose() once it is
// made. oneDNN's f32 brgemm reads a plain B row by row, which on some shapes runs at half speed
// (N = 3072 on a Sapphire Rapids core: 150 against 310 GFLOP/s); a packed B does not.
// Scratch slots per thread: 0 and 1 for the two inputs of a GEMM, kOutputSlot for an output
// staged densely before it is copied into a strided view (AttentionGrad), kSharedDySlot for the
// bf16 copy of a linear layer's output gradient dy that its dX GEMM makes and its dW GEMM reads
// later (LinearGradInput and LinearGradWeight built with share_dy), kQSlot and kKSlot for the
// head-major bf16 copies of Q and K that AttentionScores makes and the backward's dQ and dK
// GEMMs read again (AttentionGrad built with `reuse`).
inline constexpr int kInputSlots = 2, kOutputSlot = 2, kSharedDySlot = 3, kQSlot = 4, kKSlot = 5,
                     kScratchSlots = 6;

class GemmInput {
 public:
  GemmInput() = default;
  GemmInput(const dnnl::memory::desc& view, bool bf16, int slot, bool pack = false);
  // What the matmul is built with: the view itself (f32), the dense bf16 copy, or (packed) a
  // format_tag::any desc until choose() and the chosen layout after.
  const dnnl::memory::desc& desc() const { return copies_ ? copy_ : view_; }
  // Packed: the layout the matmul chose for this input (its pd's src or weights desc).
  void choose(const dnnl::memory::desc& chosen);
  // The data for the matmul given the view's base pointer: `base` itself, or the copy (valid
  // until the slot is written again).
  const void* operator()(const float* base) const;
  // Bytes of the copy (0 for an f32 view read in place), and the same conversion into `dst`
  // instead of the scratch slot (a copy kept by the caller, e.g. for a whole optimizer step).
  size_t copy_bytes() const { return copies_ ? copy_.get_size() : 0; }
  void convert_into(const float* base, void* dst) const;

 private:
  dnnl::memory::desc view_, copy_;
  bool copies_ = false;  // bf16 or packed: the matmul reads a copy
  int slot_ = 0;
  dnnl::reorder convert_;
  mutable PrimitiveArgs args_;
};

// Grow-only scratch of at least `bytes` in slot `slot` of the calling thread.
std::byte* gemm_scratch(int slot, size_t bytes);

// f32 -> bf16, round to nearest even, as oneDNN's reorders and the AVX512-BF16 instruction
// (vcvtneps2bf16) round: a NaN stays a (quiet) NaN, a denormal input becomes a zero of its sign.
uint16_t to_bf16(float f);
// n values of src rounded as to_bf16 does, on the calling thread (vectorised).
void cast_to_bf16(uint16_t* dst, const float* src, int64_t n);

// One dense bf16 copy of strided f32 rows: row r of `width` floats starts at src + r * stride and
// goes to dst + r * width. With `head` > 0 the rows are those of a (B,S,H) array (S = `seq`,
// H = width) and the copy is head-major, (B,heads,S,d) with d = head: the d values of head g of
// row r = b * S + s go to dst + ((b * heads + g) * S + s) * d. A third of the fused qkv (width H,
// stride 3H) then becomes dense heads, the layout oneDNN's bf16 brgemm runs fastest on.
// With `src16` set instead of `src`, the rows are bf16 already (a bf16 inference handoff) and are
// copied as they are, in the same order.
// Where head g of row r = b * seq + s of a (B,seq,heads*d) array lies in its head-major
// (B,heads,seq,d) copy, in elements.
inline int64_t head_major_at(int64_t r, int64_t g, int64_t heads, int64_t seq, int64_t d) {
  return ((r / seq * heads + g) * seq + r % seq) * d;
}
struct Bf16Rows {
  const float* src;
  int64_t rows, width, stride;
  uint16_t* dst;
  int64_t head = 0, seq = 0;
  const uint16_t* src16 = nullptr;
};
// Converts every job in one parallel region (the rows of all jobs split over the threads).
void cast_rows_to_bf16(std::initializer_list<Bf16Rows> jobs);

// bf16 training, a layer's dX GEMM built with share_dy: dy (rows, width) is cast into its dense
// bf16 copy in one pass with its column sums, which the layer's dW GEMM (share_dy) needs for the
// bias gradient. The sums stay per worker thread (ordered_row_sums's chunks, order and add_row)
// until that GEMM folds them in thread order: the bits of its own pass over dy, one read less.
struct SharedDySums {
  std::vector<float> parts;
  int used = 0;  // threads that ran
  int64_t rows = 0, width = 0;
};
SharedDySums& shared_dy_sums();  // of the calling thread
void cast_rows_summing_columns(uint16_t* dst, const float* src, int64_t rows, int64_t width, SharedDySums& sums);

}  // namespace bertlab::ops

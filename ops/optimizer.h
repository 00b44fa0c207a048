#pragma once
// Optimizer updates on one parameter tensor (a slice of the flat arenas): AdamW (decoupled
// weight decay, as torch.optim.AdamW) and LAMB (per-tensor trust ratio, as NVIDIA's BERT
// recipe). Both bias-correct the moments; the gradient is first multiplied by grad_scale
// (global-norm clipping).
#include <cstdint>
#include <utility>
#include <vector>

namespace bertlab::ops {

struct AdamHyper {
  float lr = 1e-4f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  int64_t step = 1;        // 1-based optimizer step, for the bias corrections
  float grad_scale = 1.f;  // clipping factor applied to the gradient
};

// Sum of squares of g (n), accumulated in double.
double sum_of_squares(const float* g, int64_t n);
// The sum over many tensors (pointer, count) of their sums of squares in one parallel region
// instead of one per tensor: bit-identical to adding sum_of_squares of each tensor in order.
double sum_of_squares_fused(const std::vector<std::pair<const float*, int64_t>>& tensors);

// param p, first and second moments m and v, gradient g; decay: apply weight decay to this tensor.
void adamw_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h, bool decay);
void adamw_update_reference(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h,
                            bool decay);

// One parameter tensor of a fused AdamW update: its slices of the parameter, moment and
// gradient arenas, and whether weight decay applies to it.
struct AdamSegment {
  float *p, *m, *v;
  const float* g;
  int64_t n;
  bool decay;
};
// AdamW over many tensors in one parallel pass: the elements of all segments are split into one
// contiguous range per thread (a thread may cross segment boundaries), so small tensors cost no
// parallel region of their own. Each element gets exactly the arithmetic of adamw_update, so the
// result is bit-identical to calling adamw_update once per segment.
void adamw_update_fused(const std::vector<AdamSegment>& segments, const AdamHyper& h);

// LAMB computes one trust ratio per tensor; a fused tensor made of `segments` equal contiguous
// parts (the stacked query/key/value) gets one per part, as the separate tensors would.
void lamb_update(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h, bool decay,
                 int segments = 1);
// LAMB over many tensors in two parallel passes (moments and norms; then the update), instead
// of two parallel regions per tensor. Each segment is one tensor for the trust ratio (split a
// stacked query/key/value into its parts first). Bit-identical to lamb_update per segment.
void lamb_update_fused(const std::vector<AdamSegment>& segments, const AdamHyper& h);
void lamb_update_reference(float* p, float* m, float* v, const float* g, int64_t n, const AdamHyper& h,
                           bool decay);

}  // namespace bertlab::ops

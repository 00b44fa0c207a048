#include "ops/embedding.h"

namespace bertlab::ops {

void embedding_forward(float* out, const int32_t* ids, const int32_t* type_ids, const float* word,
                       const float* pos, const float* type, int64_t B, int64_t S, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < B * S; ++t) {
    const float* w = word + int64_t(ids[t]) * H;
    const float* p = pos + (t % S) * H;
    const float* ty = type + int64_t(type_ids[t]) * H;
    float* o = out + t * H;
#pragma omp simd
    for (int64_t i = 0; i < H; ++i) o[i] = w[i] + p[i] + ty[i];
  }
}

void embedding_forward_reference(float* out, const int32_t* ids, const int32_t* type_ids,
                                 const float* word, const float* pos, const float* type,
                                 int64_t B, int64_t S, int64_t H) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < H; ++i) {
        int64_t t = b * S + s;
        out[t * H + i] = (word[ids[t] * H + i] + pos[s * H + i]) + type[type_ids[t] * H + i];
      }
}

}  // namespace bertlab::ops

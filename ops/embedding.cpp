#include "ops/embedding.h"

#include <algorithm>
#include <cstring>

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

namespace bertlab::ops {

void embedding_backward(float* dword, float* dpos, float* dtype, const float* dout,
                        const int32_t* ids, const int32_t* type_ids, int64_t B, int64_t S, int64_t H) {
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (H + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(H, c0 + kBlock);
    for (int64_t t = 0; t < B * S; ++t) {
      const float* g = dout + t * H;
      float* w = dword + int64_t(ids[t]) * H;
      float* p = dpos + (t % S) * H;
      float* ty = dtype + int64_t(type_ids[t]) * H;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        w[c] += g[c];
        p[c] += g[c];
        ty[c] += g[c];
      }
    }
  }
}

void embedding_backward_reference(float* dword, float* dpos, float* dtype, const float* dout,
                                  const int32_t* ids, const int32_t* type_ids, int64_t B, int64_t S,
                                  int64_t H) {
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t c = 0; c < H; ++c) {
      dword[ids[t] * H + c] += dout[t * H + c];
      dpos[(t % S) * H + c] += dout[t * H + c];
      dtype[type_ids[t] * H + c] += dout[t * H + c];
    }
}

void gather_rows_forward(float* y, const float* x, const int32_t* positions, int64_t B, int64_t S,
                         int64_t P, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < B * P; ++r)
    std::memcpy(y + r * H, x + ((r / P) * S + positions[r]) * H, H * sizeof(float));
}

void gather_rows_backward(float* dx, const float* dy, const int32_t* positions, int64_t B,
                          int64_t S, int64_t P, int64_t H) {
  // One sequence per thread: positions may repeat within a sequence (padding), never across.
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    float* seq = dx + b * S * H;
    std::memset(seq, 0, S * H * sizeof(float));
    for (int64_t p = 0; p < P; ++p) {
      float* dst = seq + int64_t(positions[b * P + p]) * H;
      const float* src = dy + (b * P + p) * H;
#pragma omp simd
      for (int64_t c = 0; c < H; ++c) dst[c] += src[c];
    }
  }
}

void first_token_backward(float* dx, const float* dy, int64_t B, int64_t S, int64_t H) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    std::memset(dx + b * S * H, 0, S * H * sizeof(float));
    std::memcpy(dx + b * S * H, dy + b * H, H * sizeof(float));
  }
}

}  // namespace bertlab::ops

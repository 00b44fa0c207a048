#pragma once
// BERT embeddings: word + position + token type, summed (layernorm is a separate node).
#include <cstdint>

namespace bertlab::ops {

// out (B,S,H) = word[ids] + pos[s] + type[type_ids]; ids (B,S), type_ids (B,S).
// Ids must have been validated against the table sizes by the caller.
void embedding_forward(float* out, const int32_t* ids, const int32_t* type_ids, const float* word,
                       const float* pos, const float* type, int64_t B, int64_t S, int64_t H);
void embedding_forward_reference(float* out, const int32_t* ids, const int32_t* type_ids,
                                 const float* word, const float* pos, const float* type,
                                 int64_t B, int64_t S, int64_t H);

}  // namespace bertlab::ops

namespace bertlab::ops {

// Embedding backward: dword[ids] += dout, dpos[s] += dout, dtype[type_ids] += dout.
// Threads own disjoint column blocks, so repeated ids never race.
void embedding_backward(float* dword, float* dpos, float* dtype, const float* dout,
                        const int32_t* ids, const int32_t* type_ids, int64_t B, int64_t S, int64_t H);
void embedding_backward_reference(float* dword, float* dpos, float* dtype, const float* dout,
                                  const int32_t* ids, const int32_t* type_ids, int64_t B, int64_t S,
                                  int64_t H);

// y (B*P,H) = rows positions[b,p] of x (B,S,H)
void gather_rows_forward(float* y, const float* x, const int32_t* positions, int64_t B, int64_t S,
                         int64_t P, int64_t H);
// dx (B,S,H) = 0, then dx[b, positions[b,p]] += dy[b*P+p]
void gather_rows_backward(float* dx, const float* dy, const int32_t* positions, int64_t B,
                          int64_t S, int64_t P, int64_t H);
// dx (B,S,H) = 0 except dx[b,0] = dy[b]
void first_token_backward(float* dx, const float* dy, int64_t B, int64_t S, int64_t H);

}  // namespace bertlab::ops

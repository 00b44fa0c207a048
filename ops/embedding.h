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

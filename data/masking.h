#pragma once
// Masked-LM corruption as in Google's create_pretraining_data.py
// (create_masked_lm_predictions): shuffle the candidate positions (whole words when
// whole-word masking), predict round(len * prob) of them (at most max_predictions, at least
// one), and replace each chosen token by [MASK] 80% of the time, a random token 10%, and
// keep it 10%. Used by `prepare` (static masking) and by the shard reader (dynamic masking).
#include <cstdint>
#include <vector>

#include "data/rng.h"

namespace bertlab::data {

struct MaskingSpec {
  double masked_lm_prob = 0.15;
  std::size_t max_predictions = 20;
  bool whole_word = false;
  std::int32_t cls_id = -1, sep_id = -1, mask_id = -1;
  std::size_t vocab_size = 0;
  // Per vocabulary id: 1 for "##" continuation pieces (joined to the previous word when
  // masking whole words), 2 for special tokens (never drawn as random replacements).
  const std::vector<std::uint8_t>* token_kind = nullptr;
};

enum : std::uint8_t { kTokenWordStart = 0, kTokenContinuation = 1, kTokenSpecial = 2 };

struct MaskingCounts {
  std::uint64_t masked = 0, replaced_by_mask = 0, replaced_by_random = 0, kept = 0;
};

// Corrupts `tokens` in place; writes the sorted positions and original ids of the predicted
// tokens. tokens (T): [CLS] A [SEP] B [SEP].
void mask_tokens(std::vector<std::int32_t>& tokens, const MaskingSpec& spec, Rng& rng,
                 std::vector<std::uint16_t>& positions, std::vector<std::int32_t>& labels,
                 MaskingCounts* counts = nullptr);

}  // namespace bertlab::data

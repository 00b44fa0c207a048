#include "data/masking.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace bertlab::data {

void mask_tokens(std::vector<std::int32_t>& tokens, const MaskingSpec& spec, Rng& rng,
                 std::vector<std::uint16_t>& positions, std::vector<std::int32_t>& labels,
                 MaskingCounts* counts) {
  positions.clear();
  labels.clear();
  const auto& kind = *spec.token_kind;
  // Candidate groups: each token, or each whole word when masking whole words.
  thread_local std::vector<std::uint32_t> group_start, order;
  thread_local std::vector<std::uint16_t> group_members;
  group_start.clear();
  group_members.clear();
  bool after_special = true;  // a word never continues across [CLS] or [SEP]
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    auto t = tokens[i];
    if (t == spec.cls_id || t == spec.sep_id) {
      after_special = true;
      continue;
    }
    bool joins = spec.whole_word && !after_special &&
                 kind[static_cast<std::size_t>(t)] == kTokenContinuation;
    after_special = false;
    if (!joins) group_start.push_back(static_cast<std::uint32_t>(group_members.size()));
    group_members.push_back(static_cast<std::uint16_t>(i));
  }
  const std::size_t groups = group_start.size();
  group_start.push_back(static_cast<std::uint32_t>(group_members.size()));
  order.resize(groups);
  std::iota(order.begin(), order.end(), 0u);
  rng.shuffle(order.begin(), order.end());

  const auto wanted = static_cast<std::size_t>(std::llround(static_cast<double>(tokens.size()) * spec.masked_lm_prob));
  const std::size_t num_to_predict = std::min(spec.max_predictions, std::max<std::size_t>(1, wanted));
  const std::vector<std::int32_t> original = tokens;
  for (auto g : order) {
    if (positions.size() >= num_to_predict) break;
    std::size_t size = group_start[g + 1] - group_start[g];
    if (positions.size() + size > num_to_predict) continue;  // groups never overlap: no cover check
    for (auto k = group_start[g]; k < group_start[g + 1]; ++k) {
      auto i = group_members[k];
      std::int32_t replacement;
      if (rng.uniform() < 0.8) {
        replacement = spec.mask_id;
        if (counts) ++counts->replaced_by_mask;
      } else if (rng.uniform() < 0.5) {
        replacement = original[i];
        if (counts) ++counts->kept;
      } else {
        do {  // a random ordinary token: never [CLS], [SEP], [PAD], [MASK] or [UNK]
          replacement = static_cast<std::int32_t>(rng.randint(0, static_cast<std::int64_t>(spec.vocab_size) - 1));
        } while (kind[static_cast<std::size_t>(replacement)] == kTokenSpecial);
        if (counts) ++counts->replaced_by_random;
      }
      tokens[i] = replacement;
      positions.push_back(i);
    }
  }
  std::sort(positions.begin(), positions.end());
  for (auto p : positions) labels.push_back(original[p]);
  if (counts) counts->masked += positions.size();
}

}  // namespace bertlab::data

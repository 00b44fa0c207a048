#pragma once
// How far a lookup of nearby tokens gets on the held-out masked-LM task: the yardsticks that
// evaluation prints beside the model's accuracy (docs/training.md, "Plateau diagnostics"),
// defined exactly as tests/reference/mlm_context_baseline.py defines them.
//
// Counts, over the training split's text (the stored labels put back at the masked positions),
// which token follows each token, which precedes it and which stands between each pair, at the
// interior positions of each sequence (1 to n - 2 of n tokens); the most frequent token over all
// positions. Then predicts each masked position of a batch from its neighbours in the model's
// input (themselves masked or not, as the model sees them): from the left one, from the right
// one, and from both (an unseen pair falls back to the left one's prediction); an unseen
// neighbour, or none (the sequence's first or last position), falls back to the most frequent
// token. Ties go to the token seen first in the training text, as Python's
// Counter.most_common(1) breaks them.
#include <cstdint>
#include <utility>
#include <vector>

#include "data/shard.h"

namespace bertlab::data {

// Masked positions scored, and how many each lookup predicted right.
struct YardstickHits {
  int64_t masked = 0, left = 0, right = 0, both = 0;
  YardstickHits& operator+=(const YardstickHits& o) {
    masked += o.masked, left += o.left, right += o.right, both += o.both;
    return *this;
  }
  double accuracy(int64_t hits) const { return masked ? double(hits) / double(masked) : 0.0; }
};

class ContextYardsticks {
 public:
  // The count tables of every instance of `train` (its stored masks undone), counted in parallel
  // with TBB; the tables do not depend on the number of threads.
  explicit ContextYardsticks(const PretrainingDataset& train);

  // The lookups' hits on the masked positions of `batch` (those with weight > 0). A sequence's
  // tokens are those under attention_mask 1, which fill_batch puts first.
  YardstickHits score(const Batch& batch) const;

  int64_t training_tokens() const { return tokens_; }
  int32_t most_frequent() const { return top_; }

 private:
  static constexpr int32_t kNone = -1;
  int32_t after(int32_t left) const;    // the prediction from the left neighbour, or kNone
  int32_t before(int32_t right) const;  // ... from the right neighbour
  int32_t between(int32_t left, int32_t right) const;

  int64_t tokens_ = 0;
  int32_t top_ = kNone;
  std::vector<int32_t> after_, before_;  // per neighbour id
  std::vector<std::pair<uint64_t, int32_t>> between_;  // (left << 32 | right, prediction), sorted
};

}  // namespace bertlab::data

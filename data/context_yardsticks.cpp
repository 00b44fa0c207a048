#include "data/context_yardsticks.h"

#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <tuple>

#include "base/error.h"
#include "base/tsan.h"

namespace bertlab::data {

namespace {

// One count: `token` seen in `context` at position `at` of the training text (instance index x
// sequence length + position: increasing in the order the Python reference reads the text).
struct Occurrence {
  uint64_t context;
  uint64_t at;
  int32_t token;
};

bool by_context_token_position(const Occurrence& a, const Occurrence& b) {
  return std::tie(a.context, a.token, a.at) < std::tie(b.context, b.token, b.at);
}

// The occurrences of one chunk of instances, and its token counts.
struct ChunkCounts {
  std::vector<Occurrence> after, before, between;
  std::vector<int64_t> count;    // per token id
  std::vector<uint64_t> first;   // per token id: where first seen (UINT64_MAX: not seen)
  int64_t tokens = 0;
};

// Per context of a sorted list of occurrences: the token seen most often in it, ties to the one
// seen first. Calls emit(context, token) once per context, in increasing context order.
template <class Emit>
void most_common_per_context(const std::vector<Occurrence>& sorted, Emit emit) {
  for (size_t i = 0; i < sorted.size();) {
    const uint64_t context = sorted[i].context;
    int32_t best = -1;
    int64_t best_count = 0;
    uint64_t best_first = UINT64_MAX;
    while (i < sorted.size() && sorted[i].context == context) {
      const int32_t token = sorted[i].token;
      const uint64_t first = sorted[i].at;  // the run of (context, token) is sorted by position
      int64_t n = 0;
      for (; i < sorted.size() && sorted[i].context == context && sorted[i].token == token; ++i) ++n;
      if (n > best_count || (n == best_count && first < best_first)) best = token, best_count = n, best_first = first;
    }
    emit(context, best);
  }
}

}  // namespace

ContextYardsticks::ContextYardsticks(const PretrainingDataset& train) {
  const size_t V = train.vocab_size(), S = train.seq_len(), N = train.size();
  // Chunks of instances in a fixed number: what each holds does not depend on the threads.
  const size_t chunks = std::max<size_t>(1, std::min<size_t>(N, 64));
  std::vector<ChunkCounts> parts(chunks);
  TsanJoin join;
  tbb::parallel_for(size_t{0}, chunks, [&](size_t c) {
    join.enter();
    ChunkCounts& p = parts[c];
    p.count.assign(V, 0);
    p.first.assign(V, UINT64_MAX);
    for (size_t index = c * N / chunks; index < (c + 1) * N / chunks; ++index) {
      Instance inst = train.instance(index, 0);
      auto& s = inst.tokens;
      for (size_t k = 0; k < inst.masked_positions.size(); ++k) s[inst.masked_positions[k]] = inst.masked_labels[k];
      const uint64_t base = uint64_t(index) * S;
      for (size_t i = 0; i < s.size(); ++i) {
        check(s[i] >= 0 && size_t(s[i]) < V, "training instance {}: token id {} is outside the vocabulary of {}",
              index, s[i], V);
        ++p.count[s[i]];
        p.first[s[i]] = std::min(p.first[s[i]], base + i);
      }
      p.tokens += static_cast<int64_t>(s.size());
      for (size_t i = 1; i + 1 < s.size(); ++i) {
        const auto left = uint64_t(uint32_t(s[i - 1])), right = uint64_t(uint32_t(s[i + 1]));
        p.after.push_back({left, base + i, s[i]});
        p.before.push_back({right, base + i, s[i]});
        p.between.push_back({left << 32 | right, base + i, s[i]});
      }
    }
    join.leave();
  });
  join.joined();

  std::vector<int64_t> count(V, 0);
  std::vector<uint64_t> first(V, UINT64_MAX);
  size_t occurrences = 0;
  for (const auto& p : parts) {
    tokens_ += p.tokens;
    occurrences += p.after.size();
    for (size_t t = 0; t < V; ++t) count[t] += p.count[t], first[t] = std::min(first[t], p.first[t]);
  }
  for (size_t t = 0; t < V; ++t)
    if (count[t] > 0 && (top_ == kNone || count[t] > count[top_] || (count[t] == count[top_] && first[t] < first[top_])))
      top_ = static_cast<int32_t>(t);

  auto table = [&](std::vector<Occurrence> ChunkCounts::*member) {
    std::vector<Occurrence> all;
    all.reserve(occurrences);
    for (auto& p : parts) {
      auto& v = p.*member;
      all.insert(all.end(), v.begin(), v.end());
      std::vector<Occurrence>().swap(v);
    }
    tbb::parallel_sort(all.begin(), all.end(), by_context_token_position);
    return all;
  };
  after_.assign(V, kNone);
  most_common_per_context(table(&ChunkCounts::after), [&](uint64_t c, int32_t t) { after_[c] = t; });
  before_.assign(V, kNone);
  most_common_per_context(table(&ChunkCounts::before), [&](uint64_t c, int32_t t) { before_[c] = t; });
  most_common_per_context(table(&ChunkCounts::between), [&](uint64_t c, int32_t t) { between_.emplace_back(c, t); });
}

int32_t ContextYardsticks::after(int32_t left) const {
  return left >= 0 && size_t(left) < after_.size() ? after_[left] : kNone;
}

int32_t ContextYardsticks::before(int32_t right) const {
  return right >= 0 && size_t(right) < before_.size() ? before_[right] : kNone;
}

int32_t ContextYardsticks::between(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return kNone;
  const uint64_t key = uint64_t(uint32_t(left)) << 32 | uint64_t(uint32_t(right));
  const auto it = std::lower_bound(between_.begin(), between_.end(), std::make_pair(key, INT32_MIN));
  return it != between_.end() && it->first == key ? it->second : kNone;
}

YardstickHits ContextYardsticks::score(const Batch& batch) const {
  YardstickHits hits;
  const size_t B = batch.batch_size, T = batch.seq_len, P = batch.max_predictions;
  for (size_t b = 0; b < B; ++b) {
    const int32_t* s = &batch.input_ids[b * T];
    const size_t n = static_cast<size_t>(std::count(&batch.attention_mask[b * T], &batch.attention_mask[b * T] + T, 1));
    for (size_t k = 0; k < P; ++k) {
      if (batch.masked_lm_weights[b * P + k] <= 0) continue;
      const size_t i = static_cast<size_t>(batch.masked_lm_positions[b * P + k]);
      const int32_t y = batch.masked_lm_ids[b * P + k];
      const int32_t left = i > 0 ? s[i - 1] : kNone, right = i + 1 < n ? s[i + 1] : kNone;
      const int32_t l = after(left), r = before(right), both = between(left, right);
      ++hits.masked;
      hits.left += (l != kNone ? l : top_) == y;
      hits.right += (r != kNone ? r : top_) == y;
      hits.both += (both != kNone ? both : l != kNone ? l : top_) == y;
    }
  }
  return hits;
}

}  // namespace bertlab::data

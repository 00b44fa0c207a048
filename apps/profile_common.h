#pragma once
// Helpers shared by `bertlab calibrate` and `bertlab profile`.
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

#include "base/error.h"
#include "base/file_util.h"
#include "runtime/model.h"

namespace bertlab::app {

// A batch shaped for graph `g`: random in-vocabulary ids, two segments, no padding and, when
// the graph is a training graph, P evenly spread masked positions per sequence with random
// labels and alternating next-sentence labels. Timing does not depend on the values, except
// that without padding the attention scores skip the mask-bias add (ops::AttentionScores), as
// they do for packed pretraining data.
inline BertInputs synthetic_inputs(const BertConfig& c, const Graph& g) {
  const Shape& ids = g.tensor(g.tensor_id("input_ids")).shape;
  BertInputs in;
  in.batch = ids.at(0);
  in.seq = ids.at(1);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  for (int64_t i = 0; i < in.batch * in.seq; ++i) {
    in.input_ids.push_back(id(rng));
    in.token_type_ids.push_back(i % in.seq >= in.seq / 2 ? 1 : 0);
    in.attention_mask.push_back(1);
  }
  if (auto pos = g.find_tensor("masked_lm_positions")) {
    const int64_t P = g.tensor(*pos).shape.at(1);
    in.max_predictions = P;
    for (int64_t b = 0; b < in.batch; ++b)
      for (int64_t k = 0; k < P; ++k) {
        in.masked_lm_positions.push_back(static_cast<int32_t>(k * in.seq / P));
        in.masked_lm_labels.push_back(id(rng));
      }
    for (int64_t b = 0; b < in.batch; ++b) in.next_sentence_labels.push_back(static_cast<int32_t>(b % 2));
  }
  return in;
}

}  // namespace bertlab::app

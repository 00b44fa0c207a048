#include "runtime/recipe.h"

#include <cmath>

#include "base/error.h"

namespace bertlab {

double default_position_init_scale(const BertConfig& c) { return 2 * c.initializer_range; }

void init_positions_sinusoidal(ParamStore& params, const BertConfig& c, double amplitude) {
  const int64_t P = c.max_position_embeddings, H = c.hidden_size;
  check(params.info(kPositionTable).shape == Shape{P, H}, "{}: expected shape ({}, {})", kPositionTable, P, H);
  float* pe = params.data(kPositionTable);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; i += 2) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(i) / static_cast<double>(H));
      pe[p * H + i] = static_cast<float>(amplitude * std::sin(angle));
      if (i + 1 < H) pe[p * H + i + 1] = static_cast<float>(amplitude * std::cos(angle));
    }
}

BertInputs truncate_sequences(const BertInputs& in, int64_t len) {
  check(len > 0 && len <= in.seq, "truncating sequences of {} tokens to {}: expected 1 to {}", in.seq, len, in.seq);
  BertInputs out;
  out.batch = in.batch, out.seq = len, out.max_predictions = in.max_predictions;
  const int64_t P = in.max_predictions;
  for (int64_t b = 0; b < in.batch; ++b) {
    const auto row = static_cast<size_t>(b * in.seq);
    out.input_ids.insert(out.input_ids.end(), in.input_ids.begin() + row, in.input_ids.begin() + row + len);
    out.token_type_ids.insert(out.token_type_ids.end(), in.token_type_ids.begin() + row, in.token_type_ids.begin() + row + len);
    out.attention_mask.insert(out.attention_mask.end(), in.attention_mask.begin() + row, in.attention_mask.begin() + row + len);
    int64_t kept = 0;
    for (int64_t p = 0; p < P; ++p) {
      const auto k = static_cast<size_t>(b * P + p);
      if (in.masked_lm_labels[k] == -100 || in.masked_lm_positions[k] >= len) continue;
      out.masked_lm_positions.push_back(in.masked_lm_positions[k]);
      out.masked_lm_labels.push_back(in.masked_lm_labels[k]);
      ++kept;
    }
    for (; kept < P; ++kept) out.masked_lm_positions.push_back(0), out.masked_lm_labels.push_back(-100);
  }
  out.next_sentence_labels = in.next_sentence_labels;
  return out;
}

std::vector<std::string> residual_branch_outputs(const BertConfig& c) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    for (const char* dense : {"attention.output.dense", "output.dense"})
      for (const char* part : {".weight", ".bias"}) names.push_back(fmt::format("bert.encoder.layer.{}.{}{}", i, dense, part));
  return names;
}

void scale_residual_branches(ParamStore& params, const BertConfig& c, double factor) {
  const auto f = static_cast<float>(factor);
  for (const auto& name : residual_branch_outputs(c)) {
    float* p = params.data(name);
    for (int64_t i = 0, n = params.info(name).numel(); i < n; ++i) p[i] *= f;
  }
}

}  // namespace bertlab

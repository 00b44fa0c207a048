#include "runtime/eval_diagnostics.h"

#include <cmath>

#include "base/error.h"

namespace bertlab {

void mark_diagnostic_outputs(Graph& g, const BertConfig& c) {
  // The tensor names build_bert gives: the softmax of each layer's attention, and the input of
  // the masked-LM head's gather, which is the last layer's output.
  const auto gather = g.find_node("mlm.gather");
  check(gather.has_value(), "the plateau diagnostics need a pretraining graph in train mode (it has no mlm.gather node)");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    g.mark_output(g.tensor_id(fmt::format("encoder.{}.attention.softmax.out", i)), fmt::format("attention_probs.{}", i));
  g.mark_output(g.node(*gather).inputs.at(0), "last_hidden_state");
}

RepresentationSums& RepresentationSums::operator+=(const RepresentationSums& o) {
  cosine += o.cosine, sequences += o.sequences, rows += o.rows;
  if (entropy.size() < o.entropy.size()) entropy.resize(o.entropy.size(), 0.0);
  for (size_t l = 0; l < o.entropy.size(); ++l) entropy[l] += o.entropy[l];
  return *this;
}

double RepresentationSums::mean_entropy() const {
  double total = 0;
  for (double e : entropy) total += e;
  return rows && !entropy.empty() ? total / (double(rows) * double(entropy.size())) : 0.0;
}

std::vector<double> RepresentationSums::entropy_per_layer() const {
  std::vector<double> mean;
  for (double e : entropy) mean.push_back(rows ? e / double(rows) : 0.0);
  return mean;
}

void add_position_cosines(RepresentationSums& sums, const float* hidden, const int32_t* mask, int64_t B, int64_t S,
                          int64_t H) {
  // The sum over ordered pairs i != j of u_i . u_j, with u the unit vectors, is
  // |sum_i u_i|^2 - sum_i |u_i|^2: O(n H) per sequence rather than O(n^2 H).
  std::vector<double> total(static_cast<size_t>(H));
  for (int64_t b = 0; b < B; ++b) {
    std::fill(total.begin(), total.end(), 0.0);
    int64_t n = 0, unit = 0;
    for (int64_t s = 0; s < S; ++s) {
      if (!mask[b * S + s]) continue;
      ++n;
      const float* x = hidden + (b * S + s) * H;
      double norm2 = 0;
      for (int64_t h = 0; h < H; ++h) norm2 += double(x[h]) * x[h];
      if (norm2 <= 0) continue;
      ++unit;
      const double inv = 1.0 / std::sqrt(norm2);
      for (int64_t h = 0; h < H; ++h) total[h] += x[h] * inv;
    }
    if (n < 2) continue;
    double sum2 = 0;
    for (double t : total) sum2 += t * t;
    sums.cosine += (sum2 - double(unit)) / (double(n) * double(n - 1));
    ++sums.sequences;
  }
}

void add_attention_entropy(RepresentationSums& sums, int64_t layer, const float* probs, const int32_t* mask, int64_t B,
                           int64_t heads, int64_t S) {
  check(layer >= 0, "attention entropy: layer {} is negative", layer);
  if (sums.entropy.size() <= static_cast<size_t>(layer)) sums.entropy.resize(static_cast<size_t>(layer) + 1, 0.0);
  // One partial sum per (sequence, head), added up in order afterwards: the same bits whatever
  // the threads (an OpenMP reduction adds the threads' sums in the order they finish).
  std::vector<double> partial(static_cast<size_t>(B * heads), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < B * heads; ++bh) {
    const int32_t* m = mask + (bh / heads) * S;
    double e = 0;
    for (int64_t q = 0; q < S; ++q) {
      if (!m[q]) continue;
      const float* p = probs + (bh * S + q) * S;
      for (int64_t k = 0; k < S; ++k)
        if (p[k] > 0) e -= double(p[k]) * std::log(double(p[k]));
    }
    partial[static_cast<size_t>(bh)] = e;
  }
  double entropy = 0;
  for (double e : partial) entropy += e;
  int64_t rows = 0;
  for (int64_t i = 0; i < B * S; ++i) rows += mask[i] != 0;
  rows *= heads;
  sums.entropy[static_cast<size_t>(layer)] += entropy;
  if (layer == 0) sums.rows += rows;
}

}  // namespace bertlab

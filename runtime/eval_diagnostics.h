#pragma once
// What evaluation measures beside the held-out accuracy, to show the pretraining plateau and
// the drop that ends it (docs/training.md, "Plateau diagnostics"): how alike the final hidden
// states of a sequence's positions are (representation collapse), and how spread the
// attention is. Sums over batches here; the means at the end of an evaluation.
#include <cstdint>
#include <vector>

#include "runtime/bert_config.h"
#include "runtime/graph.h"

namespace bertlab {

// Marks, in a pretraining graph of build_bert in train mode, what the diagnostics read as graph
// outputs: each layer's attention probabilities "attention_probs.<i>" (B, heads, S, S) and the
// encoder's output "last_hidden_state" (B, S, H). As outputs they are kept to the end of the
// run, and the attention of each layer runs as three kernels rather than one fused step
// (runtime/step_rules.h fused_steps): a graph for evaluation, not for training steps.
void mark_diagnostic_outputs(Graph& g, const BertConfig& config);

// Sums over the evaluation's batches.
struct RepresentationSums {
  double cosine = 0;      // per sequence with at least two non-pad positions: the mean pairwise cosine
  int64_t sequences = 0;  // ... those sequences
  std::vector<double> entropy;  // per layer: entropy (nats) summed over heads and non-pad query rows
  int64_t rows = 0;             // rows per layer (heads x non-pad queries; the same in every layer)

  RepresentationSums& operator+=(const RepresentationSums& o);
  double mean_cosine() const { return sequences ? cosine / double(sequences) : 0.0; }
  // Mean over layers, heads and non-pad query positions; per layer.
  double mean_entropy() const;
  std::vector<double> entropy_per_layer() const;
};

// hidden (B, S, H), mask (B, S) 1 on real tokens: per sequence with n >= 2 real positions, the
// mean over its n (n - 1) ordered pairs of distinct positions of the cosine of their hidden
// states (a zero vector's cosine with anything counts as 0). Adds them to `sums`.
void add_position_cosines(RepresentationSums& sums, const float* hidden, const int32_t* mask, int64_t B, int64_t S,
                          int64_t H);

// probs (B, heads, S, S) softmax rows of one layer, mask (B, S): -sum_k p log p (nats, 0 log 0 =
// 0) of each head's row at a real query position, summed into sums.entropy[layer] (grown as
// needed); counts the rows into sums.rows when layer == 0.
void add_attention_entropy(RepresentationSums& sums, int64_t layer, const float* probs, const int32_t* mask, int64_t B,
                           int64_t heads, int64_t S);

// The numbers of one evaluation (TrainEvent::plateau, metrics.jsonl's eval lines).
struct PlateauDiagnostics {
  double left_accuracy = 0, right_accuracy = 0, both_accuracy = 0;  // data/context_yardsticks.h
  double hidden_cosine = 0;      // RepresentationSums::mean_cosine
  double attention_entropy = 0;  // RepresentationSums::mean_entropy
  std::vector<double> attention_entropy_per_layer;
};

}  // namespace bertlab

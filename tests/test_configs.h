#pragma once
// Small BERT configurations shared by the tests, and graph helpers.
#include <cstdint>

#include "runtime/bert_builder.h"
#include "runtime/bert_config.h"
#include "runtime/executor.h"
#include "runtime/graph.h"

namespace bertlab::testing {

// A BERT config of the given sizes; everything else as BertConfig's defaults.
inline BertConfig bert_config(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads,
                              int64_t intermediate, int64_t positions) {
  BertConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = positions;
  return c;
}

// The unfused inference graph of `c` without heads (as the hwmodel tests estimate it).
inline Graph inference_graph(const BertConfig& c, int64_t batch, int64_t seq) {
  RunSpec run;
  run.batch = batch;
  run.seq = seq;
  run.heads = Heads::none;
  return build_bert(c, run);
}

// 2 layers, hidden 24, 2 heads, vocabulary 120, positions 32: trains in milliseconds.
inline BertConfig small_train_config() { return bert_config(120, 24, 2, 2, 40, 32); }

// 2 layers, hidden 12, 3 heads, vocabulary 50, positions 16: graphs and profiles.
inline BertConfig tiny_graph_config() { return bert_config(50, 12, 2, 3, 20, 16); }

// Switches off the kept bf16 x casts of g (runtime::kept_x_casts) by giving every recomputation
// they would skip a second reader, a graph output: the graph they are compared with.
inline void keep_no_x_casts(Graph& g) {
  const auto kept = kept_x_casts(g);
  for (const auto& n : g.nodes())
    if (kept[static_cast<size_t>(n.id)].role == KeptX::skipped) g.mark_output(n.outputs.at(0), n.name);
}

}  // namespace bertlab::testing

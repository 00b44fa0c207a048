#pragma once
// Small BERT configurations shared by the tests.
#include <cstdint>

#include "runtime/bert_config.h"

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

// 2 layers, hidden 24, 2 heads, vocabulary 120, positions 32: trains in milliseconds.
inline BertConfig small_train_config() { return bert_config(120, 24, 2, 2, 40, 32); }

// 2 layers, hidden 12, 3 heads, vocabulary 50, positions 16: graphs and profiles.
inline BertConfig tiny_graph_config() { return bert_config(50, 12, 2, 3, 20, 16); }

}  // namespace bertlab::testing

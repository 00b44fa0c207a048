#pragma once
// Small BERT configurations shared by the tests.
#include "runtime/bert_config.h"

namespace bertlab::testing {

// 2 layers, hidden 24, 2 heads, vocabulary 120, positions 32: trains in milliseconds.
inline BertConfig small_train_config() {
  BertConfig c;
  c.vocab_size = 120;
  c.hidden_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 40;
  c.max_position_embeddings = 32;
  return c;
}

}  // namespace bertlab::testing

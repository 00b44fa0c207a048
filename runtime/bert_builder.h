#pragma once
// Builds the op graph of BERT (BertModel or BertForPreTraining) for one run shape.
#include "runtime/bert_config.h"
#include "runtime/graph.h"

namespace bertlab {

// Inputs are named input_ids, token_type_ids, attention_mask (B,S) i32. Weight tensors carry
// Hugging Face BertForPreTraining names; the fused QKV projection of layer i is
// bert.encoder.layer.i.attention.self.qkv.{weight,bias} (query, key, value stacked).
// Outputs: last_hidden_state, pooler_output and, with pretraining heads, mlm_logits and
// nsp_logits. The MLM decoder uses the word embeddings (tied).
// The graph is built unfused; run apply_fusions() (runtime/fusion.h) to fuse.
Graph build_bert(const BertConfig& config, const RunSpec& run);

// Name of the fused QKV weight or bias of a layer, and the HF tensors stacked in it.
std::string qkv_name(int64_t layer, const std::string& suffix);  // suffix: weight | bias
std::string hf_layer_prefix(int64_t layer);                       // bert.encoder.layer.i.

}  // namespace bertlab

#pragma once
// BERT hyper-parameters as in a Hugging Face config.json, and the run a graph is built for.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "base/enum_table.h"

#include "ops/activation.h"
#include "runtime/precision.h"

namespace bertlab {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  ops::Activation hidden_act = ops::Activation::gelu;  // "gelu", "relu", "tanh", "silu" in the file
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double initializer_range = 0.02;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;
  std::string position_embedding_type = "absolute";

  int64_t head_size() const { return hidden_size / num_attention_heads; }
  // Number of trainable parameters (decoder tied to the word embeddings).
  int64_t parameter_count(bool with_pretraining_heads = true) const;
};

// Parses and validates; `origin` names the source (a file path) in error messages.
BertConfig config_from_json(const nlohmann::json& j, const std::string& origin);
BertConfig load_config(const std::filesystem::path& file);
nlohmann::json config_to_json(const BertConfig& c);  // HF-compatible fields

// BertModel, BertForPreTraining (MLM + NSP), BertForSequenceClassification (classifier on the
// pooler output) or BertForTokenClassification (classifier on every token, no pooler). Columns:
// the enum; its name (to_string); the Hugging Face architecture (config.json "architectures").
#define BERTLAB_HEADS(X)                                                                       \
  X(none, "none", "BertModel") X(pretraining, "pretraining", "BertForPreTraining")            \
  X(sequence_classification, "sequence_classification", "BertForSequenceClassification")      \
  X(token_classification, "token_classification", "BertForTokenClassification")
BERTLAB_ENUM(Heads, uint8_t, BERTLAB_HEADS)
// The Hugging Face architecture of a model with these heads.
const char* hf_architecture(Heads h);

// What a graph is built for: inference (the forward pass) or a training step (forward, losses,
// backward and the optimizer update). The names are --mode's and the graph's meta.run.mode.
#define BERTLAB_RUN_MODES(X) X(infer, "infer") X(train, "train")
BERTLAB_ENUM(RunMode, uint8_t, BERTLAB_RUN_MODES)
// The optimizer a training graph updates with: AdamW or LAMB. The names are --optimizer's and
// the graph's meta.run.optimizer.
#define BERTLAB_OPTIMIZER_KINDS(X) X(adamw, "adamw") X(lamb, "lamb")
BERTLAB_ENUM(OptimizerKind, uint8_t, BERTLAB_OPTIMIZER_KINDS)

struct RunSpec {
  int64_t batch = 1;
  int64_t seq = 128;
  RunMode mode = RunMode::infer;
  Heads heads = Heads::pretraining;
  Precision precision = Precision::fp32;  // GEMM inputs (runtime/graph.h gemm_precision)
  int64_t num_labels = 0;          // classification heads: classes
  // Training only:
  int64_t max_predictions = 0;     // masked positions per sequence; 0: ceil(0.15 * seq)
  bool dropout = true;             // dropout nodes with the config's probabilities
  // LN(A x + G(x)) in every sub-layer (DeepNorm/Admin, train --residual-scale A): the residual
  // input x scaled by A (a `scale` node) before the add. 1: plain BERT.
  double residual_scale = 1;
  bool nsp = true;                 // pretraining heads: false trains the masked LM alone (no
                                   // pooler, NSP head or loss in the graph, as BertForMaskedLM)
  OptimizerKind optimizer = OptimizerKind::adamw;
  int64_t world_size = 1;          // data-parallel ranks: > 1 adds the gradient allreduce
  struct Allreduce {               // how it runs (runtime/grad_sync.h)
    int64_t bucket_bytes = int64_t{25} << 20;  // PyTorch DDP's default bucket_cap_mb
    bool overlap = true;           // buckets start during backward (false: all after it)
    Precision wire = Precision::fp32;  // bf16: gradients rounded to bf16 on the wire
  } allreduce;
  int64_t predictions() const { return max_predictions > 0 ? max_predictions : (seq * 15 + 99) / 100; }
};

}  // namespace bertlab

#pragma once
// A BERT model in memory (config + parameters), its inputs, and loading from a model directory.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/bert_config.h"
#include "runtime/executor.h"
#include "runtime/params.h"

namespace bertlab {

struct Model {
  BertConfig config;
  Heads heads = Heads::pretraining;
  ParamStore params;
  bool from_checkpoint = false;          // false: initialised like BERT
  std::vector<std::string> unused_tensors;  // checkpoint tensors that matched no parameter
};

// The parameters of a model with this config and heads, initialised like BERT (num_labels:
// classes of a classification head).
Model init_model(const BertConfig& c, Heads heads, uint64_t seed, int64_t num_labels = 0);
// dir holds config.json and, optionally, model.safetensors (else: initialised with `seed`).
Model load_model(const std::filesystem::path& dir, Heads heads, uint64_t seed = 0);

// A batch of padded sequences, with the pretraining labels when training.
struct BertInputs {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> input_ids, token_type_ids, attention_mask;  // (batch, seq) each
  int64_t max_predictions = 0;                                     // P
  std::vector<int32_t> masked_lm_positions;  // (batch, P), padded with 0
  std::vector<int32_t> masked_lm_labels;     // (batch * P), -100 on padding
  std::vector<int32_t> next_sentence_labels; // (batch), 1 = the second segment is random
  int64_t masked_count() const;              // labels that are not -100
};

// Fills the masked-LM fields from dense labels (batch, seq) as Hugging Face writes them (-100
// where not predicted), with P slots per sequence; errors when a sequence has more than P.
void set_dense_mlm_labels(BertInputs& in, const std::vector<int32_t>& dense_labels, int64_t P,
                          const std::string& origin);

// {"input_ids": [[..]], "token_type_ids": [[..]], "attention_mask": [[..]]}: lists of equal-length
// lists; token_type_ids default to 0 and attention_mask to 1 when absent.
BertInputs inputs_from_json(const nlohmann::json& j, const std::string& origin);
// Ids inside the vocabulary, types inside type_vocab_size, mask 0/1, length within positions.
void validate_inputs(const BertInputs& in, const BertConfig& c, const std::string& origin);
// Copies a batch into the executor's input buffers (shapes must match its graph; the label
// fields are copied when the graph has those inputs).
void set_inputs(Executor& ex, const BertInputs& in);

}  // namespace bertlab

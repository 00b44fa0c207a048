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

// The parameters of a model with this config and heads, initialised like BERT.
Model init_model(const BertConfig& c, Heads heads, uint64_t seed);
// dir holds config.json and, optionally, model.safetensors (else: initialised with `seed`).
Model load_model(const std::filesystem::path& dir, Heads heads, uint64_t seed = 0);

// A batch of padded sequences.
struct BertInputs {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> input_ids, token_type_ids, attention_mask;  // (batch, seq) each
};

// {"input_ids": [[..]], "token_type_ids": [[..]], "attention_mask": [[..]]}: lists of equal-length
// lists; token_type_ids default to 0 and attention_mask to 1 when absent.
BertInputs inputs_from_json(const nlohmann::json& j, const std::string& origin);
// Ids inside the vocabulary, types inside type_vocab_size, mask 0/1, length within positions.
void validate_inputs(const BertInputs& in, const BertConfig& c, const std::string& origin);
// Copies a batch into the executor's input buffers (shapes must match its graph).
void set_inputs(Executor& ex, const BertInputs& in);

}  // namespace bertlab

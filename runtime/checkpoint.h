#pragma once
// Hugging Face BERT checkpoints: model directory = config.json + model.safetensors (+ vocab.txt).
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/bert_config.h"
#include "runtime/params.h"
#include "runtime/safetensors.h"

namespace bertlab {

// Fills every parameter of `p` from a HF BERT safetensors file. Accepts names with or without
// the "bert." prefix, legacy LayerNorm gamma/beta, the MLM bias as cls.predictions.bias or
// cls.predictions.decoder.bias; stacks query/key/value into the fused QKV; ignores
// position_ids and the tied decoder weight. Returns the names of tensors left unused.
std::vector<std::string> load_hf_weights(ParamStore& p, const SafetensorsFile& file);

// Writes the parameters under BertForPreTraining names (QKV split, decoder tied and omitted).
void save_hf_weights(const std::filesystem::path& file, const ParamStore& p);

// Writes config.json and model.safetensors into dir (created if needed), each atomically.
void save_model_dir(const std::filesystem::path& dir, const BertConfig& c, const ParamStore& p);

}  // namespace bertlab

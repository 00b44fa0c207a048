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

// SHA-256 of a file's bytes as 64 lowercase hex digits (OpenSSL's EVP digest).
std::string sha256_file(const std::filesystem::path& file);

// Checkpoint manifests: DIR/manifest.json lists every other regular file of DIR with its size
// and SHA-256. It is written last (atomically), so a directory with a complete manifest holds
// exactly the files that were saved.
inline constexpr const char* kManifestFile = "manifest.json";
void write_manifest(const std::filesystem::path& dir);
// Throws an Error naming the file that is missing, truncated, grown or changed, or saying the
// manifest itself is missing or damaged (then naming the newest valid sibling checkpoint).
void verify_manifest(const std::filesystem::path& dir);
// The checkpoint-N directory of `out` with the largest N whose manifest verifies; empty if none.
std::filesystem::path newest_valid_checkpoint(const std::filesystem::path& out);
// The checkpoint a --resume names: "latest" is the newest valid checkpoint of `out` (an error
// when there is none), anything else the directory itself; empty stays empty.
std::filesystem::path resume_dir(const std::filesystem::path& resume, const std::filesystem::path& out);
// The checkpoint-N directories of `out` in order of N (names that are not checkpoint-<digits>
// in the range of int64 are skipped).
std::vector<std::filesystem::path> checkpoints_in(const std::filesystem::path& out);

}  // namespace bertlab

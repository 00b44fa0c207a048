#pragma once
// Pretraining shards: a binary file of instances with random access (format in docs/data.md),
// and the dataset the training loop reads: all shards of a split, epoch shuffling, batches,
// and optional dynamic masking (a fresh mask for every epoch).
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/masking.h"
#include "data/pretraining.h"

namespace bertlab::data {

inline constexpr char kShardMagic[8] = {'B', 'L', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr std::uint32_t kShardVersion = 1;
inline constexpr std::uint32_t kShardHeaderBytes = 64;

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t hash = 0xCBF29CE484222325ull);

struct ShardInfo {
  std::uint32_t max_seq_length = 0;
  std::uint32_t max_predictions = 0;
  std::uint32_t vocab_size = 0;
  bool whole_word_mask = false;
  std::uint64_t vocab_checksum = 0;
  std::uint64_t num_instances = 0;
};

// Writes instances[0, count) (to a temporary name, then renames).
void write_shard(const std::filesystem::path& file, const ShardInfo& info, const Instance* instances,
                 std::size_t count);

// One shard in memory, validated on open (magic, version, sizes, checksum, every record).
class Shard {
 public:
  static Shard open(const std::filesystem::path& file);
  // The same validation of a shard's bytes held in memory; `file` names them in errors.
  static Shard parse(std::string bytes, const std::filesystem::path& file);
  const ShardInfo& info() const { return info_; }
  std::size_t size() const { return static_cast<std::size_t>(info_.num_instances); }
  Instance get(std::size_t index) const;
  const std::filesystem::path& path() const { return path_; }
  std::uint64_t checksum() const;  // the header's checksum of the whole shard

 private:
  std::filesystem::path path_;
  ShardInfo info_;
  std::string bytes_;
  std::vector<std::uint64_t> offsets_;  // record start within bytes_, num_instances + 1
};

// A batch in the layout of Google's BERT input pipeline. Shapes: (B, T) for the token
// arrays, (B, P) for the masked-LM arrays (padded with position 0, id 0, weight 0), (B) for
// next_sentence_labels (1 = B is a random segment).
struct Batch {
  std::size_t batch_size = 0, seq_len = 0, max_predictions = 0;
  std::vector<std::int32_t> input_ids, token_type_ids, attention_mask;
  std::vector<std::int32_t> masked_lm_positions, masked_lm_ids;
  std::vector<float> masked_lm_weights;
  std::vector<std::int32_t> next_sentence_labels;
};

class PretrainingDataset {
 public:
  struct Options {
    bool dynamic_masking = false;  // re-mask every instance, differently each epoch
    std::uint64_t seed = 0;        // for epoch order and dynamic masks
    // Dynamic masking at other rates than the data's (train --masked-lm-prob): the largest rate
    // instance() and fill_batch() will be given, which sizes max_predictions() (0: the data's).
    double max_masked_lm_prob = 0;
  };
  // Opens DIR/meta.json and the shards it lists for `split` ("train" or "eval").
  static PretrainingDataset open(const std::filesystem::path& dir, const std::string& split,
                                 Options options);
  PretrainingDataset(const std::filesystem::path& dir, const std::string& split, Options options);
  // The same with the text of meta.json given in memory (the vocabulary and shards are read
  // from DIR).
  PretrainingDataset(const std::filesystem::path& dir, std::string_view meta_text, const std::string& split,
                     Options options);

  std::size_t size() const { return total_; }
  std::size_t seq_len() const { return seq_len_; }
  // Masked positions per sequence: the data's, or more for a larger dynamic masking rate.
  std::size_t max_predictions() const { return max_predictions_; }
  double masked_lm_prob() const { return spec_.masked_lm_prob; }  // the data's (meta.json)
  std::size_t vocab_size() const { return vocab_size_; }
  // Prepared with --pack: single-segment sequences without next-sentence labels.
  bool packed() const { return packed_; }
  // Identifies the data, wherever it is stored: a hash of meta.json, the vocabulary and the
  // checksums of the split's shards.
  std::uint64_t fingerprint() const { return fingerprint_; }

  // A permutation of [0, size()) drawn from (seed, epoch).
  std::vector<std::size_t> epoch_order(std::size_t epoch) const;
  // Instance `index` (stored order); with dynamic masking, masked afresh for `epoch`, at the
  // rate `masked_lm_prob` (0: the data's; at most Options::max_masked_lm_prob).
  Instance instance(std::size_t index, std::size_t epoch = 0, double masked_lm_prob = 0) const;
  void fill_batch(std::span<const std::size_t> indices, std::size_t epoch, Batch& batch,
                  double masked_lm_prob = 0) const;

 private:
  std::vector<Shard> shards_;
  std::vector<std::size_t> starts_;  // first global index of each shard
  std::size_t total_ = 0, seq_len_ = 0, max_predictions_ = 0, vocab_size_ = 0;
  Options options_;
  std::vector<std::uint8_t> kinds_;
  MaskingSpec spec_;
  std::int32_t pad_id_ = 0;
  std::uint64_t fingerprint_ = 0;
  bool packed_ = false;
};

}  // namespace bertlab::data

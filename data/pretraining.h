#pragma once
// Documents -> BERT pretraining instances, as Google's create_pretraining_data.py makes them:
// next-sentence pairs (50% a random segment from another document), short_seq_prob, masked
// LM (masking.h), dupe factor. Documents are processed in parallel (TBB); every document and
// dupe pass draws from its own random stream, so the output is identical for a given seed
// whatever the thread count. 5% of the documents (eval_fraction) are held out for evaluation.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/masking.h"
#include "data/tokenizer.h"

namespace bertlab::data {

struct PrepareOptions {
  std::size_t max_seq_length = 128;
  std::size_t max_predictions_per_seq = 20;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  std::size_t dupe_factor = 1;
  bool whole_word_mask = false;
  // Sequence packing without padding (RoBERTa's FULL-SENTENCES, Cramming): no sentence
  // pairs; every sequence is [CLS] and then max_seq_length - 1 consecutive tokens of the
  // split's documents, one after another with a [SEP] after each document.
  bool pack = false;
  std::uint64_t seed = 12345;
  double eval_fraction = 0.05;
  std::size_t instances_per_shard = 1 << 16;
  bool overwrite = false;  // replace an existing output directory
};

// Called from the calling thread: a stage name, and work done out of total.
using Progress = std::function<void(std::string_view stage, std::size_t done, std::size_t total)>;

// Token ids of each sentence; sentences that tokenise to nothing are dropped.
struct TokenizedDocument {
  std::vector<std::int32_t> ids;
  std::vector<std::uint32_t> sentence_end;  // sentence k is ids[end[k-1], end[k])
  std::size_t sentences() const { return sentence_end.size(); }
};

struct Instance {
  std::vector<std::int32_t> tokens;  // [CLS] A [SEP] B [SEP], with masking applied
  std::uint16_t len_a = 0;           // tokens in segment A
  bool is_random_next = false;
  std::vector<std::uint16_t> masked_positions;  // sorted
  std::vector<std::int32_t> masked_labels;      // original ids at masked_positions
};

struct SplitStats {
  std::size_t documents = 0, instances = 0, tokens = 0, random_next = 0, shards = 0;
  MaskingCounts masking;
};

struct PrepareStats {
  SplitStats train, eval;
};

struct HeldOutSplit {
  std::vector<std::size_t> train, eval;  // document indices
};
// Shuffles document indices with `seed`; the first round(n * fraction) (at least one when
// fraction > 0) are held out for evaluation.
HeldOutSplit split_documents(std::size_t n, double eval_fraction, std::uint64_t seed);

std::vector<TokenizedDocument> tokenize_documents(const BertTokenizer& tokenizer,
                                                  const std::vector<Document>& docs,
                                                  const Progress& progress = {});

// Per-id kinds for masking (continuation "##" pieces, special tokens).
std::vector<std::uint8_t> token_kinds(const BertTokenizer& tokenizer);
MaskingSpec masking_spec(const BertTokenizer& tokenizer, const PrepareOptions& options,
                         const std::vector<std::uint8_t>& kinds);

// Instances of one split, shuffled. `stream` separates the random streams of splits.
std::vector<Instance> create_instances(const std::vector<TokenizedDocument>& docs,
                                       const BertTokenizer& tokenizer, const PrepareOptions& options,
                                       std::uint64_t stream, SplitStats& stats,
                                       const Progress& progress = {});

// Packed instances of one dupe pass (see PrepareOptions::pack), in document order before any
// shuffle: the documents are concatenated in the order given, each followed by [SEP], and cut
// into sequences of exactly max_seq_length tokens, each starting with [CLS] (segment A is the
// whole sequence, all token types 0); a last piece shorter than that is dropped.
std::vector<Instance> packed_instances(const std::vector<TokenizedDocument>& docs,
                                       const BertTokenizer& tokenizer, const PrepareOptions& options,
                                       const MaskingSpec& spec, Rng& rng, SplitStats& stats);

// The whole pipeline: tokenise, hold out, make instances, write shards, meta.json and a copy
// of the vocabulary into `out_dir` (built under a temporary name, then renamed).
PrepareStats prepare_pretraining_data(const std::vector<Document>& corpus,
                                      const BertTokenizer& tokenizer, const PrepareOptions& options,
                                      const std::filesystem::path& out_dir,
                                      const Progress& progress = {});

}  // namespace bertlab::data

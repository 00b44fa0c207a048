#pragma once
// Downstream tasks made from the Brown corpus, split into training and evaluation on the same
// held-out documents as pretraining (split_documents with the same seed and fraction):
//   pos:   part-of-speech tagging, CoNLL files (word<TAB>base tag), the base tag being the part
//          of the Brown tag before '-', '+' or '*' (nn-tl -> nn, vb+ppo -> vb, bez* -> bez;
//          tags without letters, such as `--` or `''`, stay whole);
//   genre: the 15 Brown categories on chunks of whole sentences of up to `max_tokens` word
//          pieces (with [CLS] and [SEP]), CSV text,label.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "data/tokenizer.h"

namespace bertlab::data {

#define BERTLAB_DOWNSTREAM_TASKS(X) X(pos, "pos") X(genre, "genre")
BERTLAB_ENUM(DownstreamTask, uint8_t, BERTLAB_DOWNSTREAM_TASKS)
std::string brown_base_tag(std::string_view tag);
// The category name of a Brown file name (ca01 -> news, ..., cr09 -> humor).
std::string brown_category(std::string_view file_name);

struct DownstreamOptions {
  double eval_fraction = 0.05;
  // A fraction of the training documents written apart as validation.{conll,csv} (for choosing
  // hyperparameters without looking at the held-out documents); 0: none.
  double validation_fraction = 0;
  std::uint64_t seed = 12345;
  std::size_t max_tokens = 128;  // genre chunks
  bool overwrite = false;
};

struct DownstreamStats {
  std::size_t train_documents = 0, eval_documents = 0, validation_documents = 0;
  std::size_t train_examples = 0, eval_examples = 0, validation_examples = 0;  // sentences (pos) or chunks (genre)
  std::size_t train_tokens = 0, eval_tokens = 0, validation_tokens = 0;        // words (pos)
  std::size_t labels = 0;
  double majority_accuracy = 0;     // eval accuracy of the most frequent training label
  double most_frequent_tag_accuracy = 0;  // pos: each word's most frequent training tag
  double oov_rate = 0;                    // pos: eval words not seen in training
  std::vector<std::string> eval_document_names, validation_document_names;
};

// Reads the Brown directory and writes OUT/{train,eval}.{conll,csv} (and validation.* when
// asked: then train.* holds the training documents without the validation ones), labels.txt and meta.json
// (atomically, into a new or --force'd directory).
DownstreamStats prepare_downstream(const std::filesystem::path& brown_dir, DownstreamTask task,
                                   const BertTokenizer* tokenizer, const DownstreamOptions& o,
                                   const std::filesystem::path& out);

}  // namespace bertlab::data

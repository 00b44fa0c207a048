#pragma once
// Sequence and token classification with BERT's heads (BertForSequenceClassification,
// BertForTokenClassification): labelled files encoded, batches written into an executor, one
// executor per padded length, inference over a set and its accuracy and macro-F1; and prediction
// with a fine-tuned model (`bertlab predict`). runtime/finetune trains these heads.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/enum_table.h"
#include "runtime/bert_builder.h"
#include "data/task_data.h"
#include "data/tokenizer.h"
#include "runtime/executor.h"
#include "runtime/precision.h"

namespace bertlab {

// The metric that picks the kept (best) model of a fine-tuning run (--metric).
#define BERTLAB_FINETUNE_METRICS(X) X(accuracy, "accuracy") X(macro_f1, "macro_f1")
BERTLAB_ENUM(FinetuneMetric, uint8_t, BERTLAB_FINETUNE_METRICS)

struct ClassMetrics {
  std::string label;
  double precision = 0, recall = 0, f1 = 0;
  int64_t support = 0, predicted = 0;
};

struct EvalResult {
  double loss = 0, accuracy = 0, macro_f1 = 0;
  double majority_accuracy = 0;  // always predicting the most frequent training label
  int64_t count = 0;             // labelled sequences or tokens
  std::vector<ClassMetrics> per_class;  // labels with gold or predicted items, in label order
  double metric(FinetuneMetric m) const;
};

// Accuracy, macro-F1 (over the labels present in gold or predictions, as scikit-learn's
// f1_score(average="macro")) and per-class precision/recall; items with gold -100 are skipped.
EvalResult classification_metrics(const std::vector<int32_t>& gold, const std::vector<int32_t>& pred,
                                  const data::LabelSet& labels);

// The heads of a task, the architecture config.json names for heads, and the --task spelling.
Heads heads_for(data::TaskKind t);
const char* architecture(Heads h);
const char* task_flag(Heads h);

// The classification head a fine-tuned model directory holds (from `architectures` in its
// config.json), or Heads::none.
Heads finetuned_heads(const std::filesystem::path& model_dir);

// Label names from id2label of a fine-tuned config.json (`file` names it in errors), in id order.
std::vector<std::string> id2label(const nlohmann::json& cfg, const std::filesystem::path& file);

// Refuses a model directory that does not exist or has no vocab.txt.
void check_tokenizer(const std::filesystem::path& dir);

// Encoded examples of one file, with their count of truncated ones.
struct EncodedSet {
  std::vector<data::EncodedExample> items;
  int64_t truncated = 0;
  size_t longest = 0;
};

// The examples of `file` in the format of `task`, cut to max_length tokens. `labelled`: with
// their labels, by `labels` (made from this file when empty).
EncodedSet encode_file(const std::filesystem::path& file, data::TaskKind task, const data::BertTokenizer& tok,
                       data::LabelSet* labels, bool labelled, size_t max_length);

// A (B, S) batch of encoded examples (nullptr: a padding row, ignored by the loss) written into
// an executor's inputs. Returns the labelled count (sequences or tokens).
int64_t fill_batch(Executor& ex, const std::vector<const data::EncodedExample*>& rows, int64_t B, int64_t S,
                   Heads heads, int32_t pad_id, int32_t cls_id);

// The fused graph of `heads` with L labels for (B, S) batches: training (with `optimizer`) or inference.
Graph classification_graph(const BertConfig& c, Heads heads, int64_t L, int64_t B, int64_t S, bool train,
                           Precision precision, OptimizerKind optimizer);

// Grouping by length pads a batch to a multiple of S/4 (rounded up to 8), so that at most four
// graphs of one run exist and padding stays under a quarter of S.
int64_t length_quantum(int64_t S);

// One executor per padded length (one only without grouping), made on first use; all share
// the parameters (and in training the gradients and moments).
class LengthExecutors {
 public:
  using Make = std::function<std::unique_ptr<Executor>(int64_t S)>;
  LengthExecutors(int64_t S, bool group, Make make) : S_(S), group_(group), make_(std::move(make)) {}
  // The executor for a batch of these rows, and its padded length.
  std::pair<Executor*, int64_t> at(const std::vector<const data::EncodedExample*>& rows);
  int64_t count() const { return static_cast<int64_t>(executors_.size()); }
  bool grouped() const { return group_; }
  void repack_weights() {
    for (auto& [S, ex] : executors_) ex->repack_weights();
  }

 private:
  int64_t S_;
  bool group_;
  Make make_;
  std::map<int64_t, std::unique_ptr<Executor>> executors_;
};

// The loss, accuracy and macro-F1 of the inference graphs over a labelled set, in batches of B.
EvalResult evaluate_set(LengthExecutors& executors, const EncodedSet& set, int64_t B, Heads heads, int64_t L,
                        const data::BertTokenizer& tok, const data::LabelSet& labels);

// How many labelled items of the set carry each of the L labels.
std::vector<int32_t> majority_counts(const EncodedSet& set, int64_t L);

struct PredictOptions {
  std::filesystem::path model, input, output;
  int64_t batch_size = 32, max_seq_length = 512;
};

// Writes one JSON line per input example (sequence classification: label, probability and the
// probabilities of every label; token classification: per word label and probability).
// Returns the number of examples; `log` receives messages such as the truncation count.
int64_t predict(const PredictOptions& o, const std::function<void(const std::string&)>& log);

}  // namespace bertlab

#pragma once
// Fine-tuning (`bertlab finetune`) with Hugging Face's BertForSequenceClassification /
// BertForTokenClassification heads (runtime/classify.h), as run_glue.py / run_ner.py do it:
// labels from the training file, linear warmup and decay, AdamW, evaluation (accuracy, macro-F1,
// per-class precision and recall), the best model by the chosen metric kept, the test file
// scored once at the end. What is its own sits on the setup, checkpoints and run loop that every
// kind of training shares (runtime/run_setup.h, runtime/run_loop.h).
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/classify.h"
#include "data/task_data.h"
#include "runtime/precision.h"
#include "runtime/run_loop.h"
#include "runtime/safetensors.h"
#include "runtime/train_step.h"

namespace bertlab {

struct FinetuneOptions {
  data::TaskKind task = data::TaskKind::sequence_classification;
  std::filesystem::path model;  // bertlab or Hugging Face model directory (with vocab.txt)
  std::filesystem::path train, eval, out;
  // Scored once, with the kept (best) model, after the last step (test_results.json): a split
  // that no choice of the run looks at (Hugging Face's trainer.predict on the test set).
  std::filesystem::path test;
  std::filesystem::path resume;  // a fine-tuning checkpoint, or "latest": the newest complete one in `out`
  bool overwrite = false;
  double epochs = 3.0;
  int64_t max_steps = 0;  // > 0: overrides epochs
  int64_t batch_size = 8, accum_steps = 1;
  int64_t max_seq_length = 128;  // longer examples are truncated (counted)
  int64_t eval_max_seq_length = 0;  // 0: max_seq_length
  float lr = 5e-5f;
  int64_t warmup_steps = 0;  // > 0: overrides warmup_ratio
  double warmup_ratio = 0;
  // Hugging Face TrainingArguments defaults: no weight decay, epsilon 1e-8, clip at 1.
  OptimizerConfig optimizer{OptimizerKind::adamw, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f};
  uint64_t seed = 42;
  Precision precision = Precision::fp32;  // GEMM inputs (master weights, grads stay f32)
  int64_t eval_steps = 0;  // 0: at the end of every epoch
  FinetuneMetric metric = FinetuneMetric::accuracy;
  bool from_scratch = false;  // start from random weights (control run), keeping config + tokenizer
  int64_t log_steps = 50;
  // Hugging Face's group_by_length: batches of similar lengths, each padded only to its own
  // longest example (rounded up to a quarter of the maximum), in training and evaluation.
  bool group_by_length = false;
  // Checkpoints (runtime/run_setup.h format, plus best_model.safetensors when the best model is
  // not the current one): every save_steps steps and at the end; 0: none.
  int64_t save_steps = 0;
  int64_t save_total_limit = 2;
  NonfinitePolicy nonfinite;  // --on-nonfinite stop | skip | rollback
};

struct FinetuneEvent {
  enum Kind { message, step, evaluation } kind = message;
  std::string text;  // message
  int64_t step_index = 0, max_steps = 0;
  double loss = 0, accuracy = 0, lr = 0, seq_per_s = 0, eta_s = 0;
  EvalResult eval;
  bool best = false;  // eval: the best so far by the chosen metric
};

struct FinetuneResult {
  int64_t steps = 0, best_step = 0;
  EvalResult best;               // evaluation of the kept (best) model
  std::optional<EvalResult> test;  // the kept model on the test file (FinetuneOptions::test)
  double train_seq_per_s = 0;    // sequences per second in training steps (evaluation excluded)
  int64_t seq_len = 0;           // the padded sequence length used (the longest, when grouping)
  double mean_padded_length = 0;  // mean padded length of the training batches
  int64_t graphs = 0;             // training graphs built (one per padded length)
  bool interrupted = false;       // stopped on request after `steps` (a checkpoint written, no model)
};

// Trains and writes the best model to `out` (config.json with num_labels, id2label, label2id,
// architectures; model.safetensors; vocab.txt; tokenizer_config.json; eval_results.json;
// train_results.json (throughput); metrics.jsonl), holding the lock of `out` throughout. Stops
// early, after writing a checkpoint, when `stop` becomes true (SIGINT/SIGTERM).
FinetuneResult finetune(const FinetuneOptions& o, const std::function<void(const FinetuneEvent&)>& on_event,
                        const std::atomic<bool>* stop = nullptr);

// Loads the encoder, and the pooler and the classifier when `classifier` and present in the
// file, from a checkpoint into `p`; the other parameters keep their values. Returns their names.
std::vector<std::string> load_encoder_weights(ParamStore& p, const SafetensorsFile& f, bool classifier);

}  // namespace bertlab

#pragma once
// Inference on a model directory for the Python module's Model: what `bertlab infer` does
// (load_model, build_bert, apply_fusions, Executor), with executors kept per batch shape. An
// output is handed out as a view of the executor's arena (no copy); an executor whose outputs
// are still held is not run again, a second one is made instead.
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/model.h"

namespace bertlab::python {

struct InferOutput {
  std::string name;                  // last_hidden_state, pooler_output, mlm_logits, nsp_logits, logits
  std::vector<int64_t> shape;
  float* data = nullptr;             // in the executor's arena, valid while `owner` lives
  std::shared_ptr<void> owner;       // keeps that executor out of use
};

class InferSession {
 public:
  // `dir`: config.json [+ model.safetensors]; a fine-tuned directory (architectures
  // BertForSequenceClassification / BertForTokenClassification) gets its classifier head, any
  // other the pretraining heads, as `bertlab infer`; `encoder_only`: neither (encoder and pooler,
  // as `bench --heads none` and Hugging Face's BertModel). threads 0: all cores.
  InferSession(const std::filesystem::path& dir, Precision precision, int threads, std::vector<std::string> no_fuse,
               bool encoder_only = false);
  ~InferSession();
  // One forward pass; thread-safe (one run at a time per session). `in` must be validated.
  std::vector<InferOutput> run(const BertInputs& in);

  const BertConfig& config() const { return model_->config; }
  Heads heads() const { return run_heads_; }
  std::vector<std::string> notes() const { return notes_; }  // as `bertlab infer` prints them

 private:
  struct Runner;
  std::shared_ptr<Runner> runner_for(int64_t batch, int64_t seq);

  std::shared_ptr<Model> model_;
  Precision precision_;
  int threads_;
  std::vector<std::string> no_fuse_, notes_;
  int64_t num_labels_ = 0;
  Heads run_heads_ = Heads::pretraining;  // the graph's: the model's, or none
  std::mutex mutex_;
  std::vector<std::shared_ptr<Runner>> runners_;  // free or lent; at most kKeep kept
};

}  // namespace bertlab::python

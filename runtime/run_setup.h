#pragma once
// What every kind of training (`train`: runtime/trainer, `finetune`: runtime/finetune) does the
// same way around the run loop (runtime/run_loop.h): its checkpoints (one format and one writer:
// a Hugging Face model directory, the optimizer moments and trainer_state.json, verified by a
// manifest), and its setup (RunSetup): the output directory claimed, the checkpoint to resume
// from found and verified, the resume checked against the run's settings and restored, the
// metrics log opened where the checkpoint left it, then the loop run.
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "base/dir_lock.h"
#include "base/enum_table.h"
#include "runtime/model.h"
#include "runtime/run_loop.h"

namespace bertlab {

// Which command wrote a checkpoint (trainer_state.json field "kind"; absent: pretraining).
#define BERTLAB_RUN_KINDS(X) X(pretraining, "pretraining") X(finetune, "finetune")
BERTLAB_ENUM(RunKind, uint8_t, BERTLAB_RUN_KINDS)
// The fields every trainer_state.json starts with: format, version and kind.
nlohmann::json trainer_state_header(RunKind kind);

// Checkpoint I/O, exposed for tests: DIR holds config.json, model.safetensors, vocab.txt (when
// the data has one), optimizer.safetensors and trainer_state.json, and whatever `extra` writes
// into the directory (before the manifest, so that it is verified with the rest).
void save_checkpoint(const std::filesystem::path& dir, const Model& m, const TrainingState& s,
                     const nlohmann::json& trainer_state, const std::filesystem::path& vocab_dir,
                     const std::function<void(const std::filesystem::path&)>& extra = {});
// DIR/trainer_state.json: format, version and step checked (the other fields at resume).
nlohmann::json read_trainer_state(const std::filesystem::path& file);
// The same checks of a parsed trainer state; `file` names it in errors. Returns `state`.
nlohmann::json check_trainer_state(nlohmann::json state, const std::string& file);
// Verifies DIR's manifest and reads its trainer state, refusing a checkpoint of another kind
// (a pretraining checkpoint given to finetune, or the reverse), naming the file.
nlohmann::json read_checkpoint_state(const std::filesystem::path& dir, RunKind expected);
// Refuses a resume whose settings differ from the checkpoint's: every key of `keys` must be in
// `saved` (DIR/trainer_state.json) and equal to `now`'s; the error names the setting.
void check_resume_settings(const nlohmann::json& saved, const nlohmann::json& now,
                           std::initializer_list<const char*> keys, const std::filesystem::path& dir);
// Every config field of `here` equals the checkpoint's in `dir` (vocab_size too unless
// ignore_vocab: a fresh model from --config takes its vocabulary size from the data).
void check_same_model(const BertConfig& checkpoint, const BertConfig& here, const std::filesystem::path& dir,
                      bool ignore_vocab);
// The weights (model.safetensors, checked to be of m's shape) and moments of a checkpoint.
void load_checkpoint_weights(const std::filesystem::path& dir, Model& m, TrainingState& s);
// The tokenizer's files (vocab.txt, tokenizer_config.json) of `from` that exist, into `to`
// (nothing when `from` is empty).
void copy_tokenizer(const std::filesystem::path& from, const std::filesystem::path& to);

// The setup of one run, in the order every kind of training needs it.
class RunSetup {
 public:
  // Checks the loop's options; takes the lock of the output directory (when this process
  // writes), refusing one with anything in it unless the run overwrites or resumes; finds the
  // checkpoint of `resume` ("latest": the newest complete one in the output directory) and reads
  // its trainer state, verified and of `kind`, before anything else is read from it.
  RunSetup(RunKind kind, LoopOptions loop, const std::filesystem::path& resume, bool overwrite);

  // The driver sets what it learns from its data (fine-tuning: the steps, the evaluations).
  LoopOptions loop;

  bool resuming() const { return !resume_.empty(); }
  // The checkpoint resumed from (empty on a fresh start), and its trainer state.
  const std::filesystem::path& resume() const { return resume_; }
  const nlohmann::json& saved() const { return saved_; }
  // Refuses a resume whose `keys` differ between the checkpoint and `now` (the run's settings).
  void check_resume(const nlohmann::json& now, std::initializer_list<const char*> keys) const;

  // Reads a checkpoint's weights and the driver's own state: `dir` and its trainer state.
  using Load = std::function<void(const std::filesystem::path& dir, const nlohmann::json& state)>;
  // Where the run starts: step 0, or the resumed checkpoint loaded by `load`.
  LoopState start(const Load& load) const;
  // A checkpoint of this run (the loop's restore hook: a rollback), verified, loaded by `load`.
  LoopState restore(const std::filesystem::path& dir, const Load& load) const;
  // The trainer state of a checkpoint at `at`: the run's settings (`run_state`) with the step
  // and the loop's state.
  static nlohmann::json checkpoint_state(nlohmann::json run_state, const LoopState& at);

  // metrics.jsonl, cut back to the step resumed from (a log that writes nothing on the other
  // ranks); open before the first step.
  MetricsLog& open_metrics(int64_t resumed_step);
  MetricsLog& metrics() { return metrics_; }
  // The loop from `start` to loop.max_steps (runtime/run_loop.h).
  LoopState run(const LoopState& start, const LoopHooks& hooks);

 private:
  RunKind kind_;
  DirLock lock_;  // held for the whole run
  std::filesystem::path resume_;
  nlohmann::json saved_;
  MetricsLog metrics_;
};

}  // namespace bertlab

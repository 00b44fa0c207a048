#pragma once
// Pretraining (`bertlab train`): what is its own, on the setup, checkpoints and run loop that
// every kind of training shares (runtime/run_setup.h, runtime/run_loop.h): the prepared MLM/NSP
// data and its instance order, the model from a config, a model directory or a checkpoint, the
// recipe options, the held-out evaluation with the plateau diagnostics, data parallelism.
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "base/enum_table.h"

#include "runtime/eval_diagnostics.h"
#include "runtime/lr_schedule.h"
#include "runtime/recipe.h"
#include "runtime/run_loop.h"
#include "runtime/run_setup.h"
#include "runtime/train_step.h"

namespace bertlab {

struct TrainOptions {
  std::filesystem::path config;      // config.json for a fresh model (or empty with model/resume)
  std::filesystem::path model;       // start from this model directory
  std::filesystem::path data;        // prepared data directory (bertlab prepare)
  std::filesystem::path eval_data;   // default: `data` (its eval split)
  std::filesystem::path out;
  std::filesystem::path resume;      // a checkpoint directory written by a previous run, or
                                     // "latest": the newest complete checkpoint in `out`
  bool overwrite = false;
  int64_t max_steps = 1000, batch_size = 32, accum_steps = 1;
  int64_t seq_len = 0;               // 0: the data's sequence length
  float lr = 1e-4f;
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::linear;
  int64_t decay_steps = 0;           // wsd: the linear decay's steps at the end (or:)
  double decay_ratio = 0;            // wsd: ... as a fraction of max_steps (one of the two)
  double min_lr_ratio = 0;           // wsd: the decay ends at lr x this instead of 0
  // The learned position table of a new model: BERT's normal init, or scaled sinusoids of
  // amplitude position_init_scale (0: runtime/recipe.h default_position_init_scale).
  PositionInit position_init = PositionInit::normal;
  double position_init_scale = 0;
  // The position table's learning rate x position_lr_scale for the first position_lr_steps steps.
  double position_lr_scale = 1;
  int64_t position_lr_steps = 0;
  // LN(A x + G(x)) in every sub-layer while training (runtime/recipe.h); the checkpoints hold
  // the plain BERT it equals (G's output projections / A), unfolded again on resume.
  double residual_scale = 1;
  // Sequence-length warmup: the first seq_len_warmup_steps steps train on the first
  // seq_len_warmup_len tokens of each (packed) sequence (0, 0: off).
  int64_t seq_len_warmup_steps = 0, seq_len_warmup_len = 0;
  bool nsp = true;                   // false: masked LM only (no NSP head or loss)
  bool dropout = true;               // false: no dropout while training (the saved config keeps
                                     // its probabilities, for fine-tuning)
  float power = 1.0f;                // polynomial decay power
  OptimizerConfig optimizer;
  uint64_t seed = 42;
  bool dynamic_masking = false;
  // Dynamic masking at this rate instead of the data's (0: the data's), going linearly to
  // masked_lm_prob_final at the last step when that is given (0: constant).
  double masked_lm_prob = 0, masked_lm_prob_final = 0;
  Precision precision = Precision::fp32;  // GEMM inputs (master weights, grads stay f32)
  RunSpec::Allreduce allreduce;      // data parallel: buckets, overlap, bf16 on the wire
  int64_t save_steps = 0;            // 0: only at the end
  int64_t save_total_limit = 2;
  int64_t log_steps = 10, eval_steps = 0, eval_batches = 20;
  // Each evaluation also measures the plateau diagnostics (runtime/eval_diagnostics.h): the
  // neighbour yardsticks (their count tables made once, before step 1), the hidden-state cosine
  // and the attention entropy. false: the held-out losses and accuracy alone.
  bool eval_diagnostics = true;
  NonfinitePolicy nonfinite;         // --on-nonfinite stop | skip | rollback
};

struct TrainEvent {
  // skipped: a step's update dropped; dropped: a micro-batch left out of a step's update
  // yardsticks: the count tables of the neighbour yardsticks made (before step 1)
  enum Kind { step, eval, checkpoint, interrupted, skipped, dropped, rolled_back, yardsticks } kind = step;
  int64_t step_index = 0, max_steps = 0;
  StepStats stats;
  double lr = 0, seq_per_s = 0, eta_s = 0;
  double baseline_accuracy = 0;  // eval: accuracy of always predicting the most frequent label
  std::optional<PlateauDiagnostics> plateau;  // eval, with TrainOptions::eval_diagnostics
  double seconds = 0;            // yardsticks: the time the count tables took
  int64_t tokens = 0;            // yardsticks: the training tokens counted
  std::string path;              // checkpoint: where it was written; rolled_back: the one returned to
  std::string reason;            // skipped, rolled_back: why (the step's error); dropped: the micro-batch's
  std::string text;              // the loop's events (checkpoint ... rolled_back): the line reporting it
};

// The learning-rate schedule of these options (runtime/lr_schedule.h), and its functions on them.
LrScheduleOptions lr_schedule(const TrainOptions& o);
float learning_rate(const TrainOptions& o, int64_t step);
int64_t wsd_decay_steps(const TrainOptions& o);
void check_lr_schedule(const TrainOptions& o);

// The dynamic masking rate of a 1-based step: masked_lm_prob at step 1, linearly to
// masked_lm_prob_final at max_steps (Ankner et al. 2023); 0 when the data's rate applies.
double masked_lm_prob_at(const TrainOptions& o, int64_t step);

// Runs training; reports through `on_event` (the app prints). Stops early, after writing a
// checkpoint, when `stop` becomes true (SIGINT/SIGTERM). Returns the last step done.
int64_t train(const TrainOptions& o, const std::function<void(const TrainEvent&)>& on_event,
              const std::atomic<bool>* stop = nullptr);

// read_checkpoint_state(dir, pretraining) + load_checkpoint_weights; returns the trainer state.
nlohmann::json load_checkpoint(const std::filesystem::path& dir, Model& m, TrainingState& s);

}  // namespace bertlab

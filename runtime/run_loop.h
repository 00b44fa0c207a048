#pragma once
// The one run loop of every kind of training (pretraining in runtime/trainer, fine-tuning in
// runtime/finetune): steps, evaluation, checkpoints every --save-steps in the verified format of
// runtime/checkpoint.h with the oldest pruned, metrics.jsonl, a stop on request (SIGINT,
// SIGTERM), and what to do when a step's loss or gradients are not finite. The caller supplies
// the step, the evaluation and its checkpoint contents as hooks.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/dir_lock.h"
#include "base/error.h"

namespace bertlab {

// A training step whose loss or gradients are not finite. The step's update was not applied:
// the parameters and optimizer moments are as they were before it.
struct NonfiniteError : Error {
  using Error::Error;
};

// --on-nonfinite: stop (the run ends with the error), skip (the step's update is dropped and
// training goes on), rollback (back to the newest checkpoint, past the data that led there).
enum class OnNonfinite : uint8_t { stop, skip, rollback };
const char* to_string(OnNonfinite a);
// Throws Error naming `what` (the flag) and the accepted values.
OnNonfinite on_nonfinite_from_string(const std::string& s, const std::string& what = "--on-nonfinite");

struct NonfinitePolicy {
  OnNonfinite action = OnNonfinite::stop;
  int64_t limit = 3;     // skip: steps skipped within any `window` consecutive steps; rollback: rollbacks per run
  int64_t window = 100;  // steps (skip)
  // Test hook: the data batches of these steps in the original order (1-based) give a
  // non-finite loss, as corrupted batches would.
  std::vector<int64_t> inject_at;
};

// Where a run stands; saved in each checkpoint's trainer_state.json (field "loop") so that a
// resume continues exactly, rollbacks and skips included.
struct LoopState {
  int64_t step = 0;         // optimizer steps done
  int64_t data_offset = 0;  // steps' worth of data skipped by rollbacks: step t reads the data of t + offset
  int64_t rollbacks = 0;
  std::vector<int64_t> skipped;  // steps whose update was dropped, within the last window
  nlohmann::json to_json() const;
  // From a trainer state (`file` names it in errors); a state without "loop" (checkpoints from
  // before it) is at its "step" with nothing skipped.
  static LoopState from_trainer_state(const nlohmann::json& state, const std::string& file);
};

struct LoopOptions {
  std::filesystem::path out;
  int64_t max_steps = 0;
  int64_t eval_steps = 0;        // evaluate every N steps (0: only at the end); always at max_steps
  int64_t save_steps = 0;        // checkpoint every N steps (0: none but the end's, when checkpoint_at_end)
  int64_t save_total_limit = 2;  // checkpoints kept (0: all)
  bool checkpoint_at_end = true;
  bool writer = true;            // false: another rank writes the checkpoints and the log
  NonfinitePolicy nonfinite;
};

// Refuses options that cannot work before anything runs: rollback without checkpoints.
void check_loop_options(const LoopOptions& o);

struct LoopEvent {
  enum Kind { checkpoint, skipped, rolled_back, interrupted } kind = checkpoint;
  int64_t step = 0;
  std::string path;    // checkpoint: where it was written; rolled_back: the checkpoint returned to
  std::string reason;  // skipped, rolled_back: the error of the step
};

struct LoopHooks {
  // Optimizer step `step` on the data of step `data_step`; logs its own line. Throws
  // NonfiniteError (with the update not applied) when the loss or gradients are not finite.
  std::function<void(int64_t step, int64_t data_step)> step;
  std::function<void(int64_t step)> evaluate;
  // Writes a complete checkpoint to `dir` (runtime/trainer.h save_checkpoint) whose trainer
  // state holds `loop.to_json()` as "loop".
  std::function<void(const std::filesystem::path& dir, const LoopState& loop)> save;
  // Loads a checkpoint that `save` wrote: weights, moments and the caller's own state.
  std::function<LoopState(const std::filesystem::path& dir)> restore;
  std::function<bool()> stop_requested;
  std::function<void(const LoopEvent&)> on_event;
};

// Takes the lock of the output directory `out` (creating it), then refuses an existing
// directory with anything in it unless the run overwrites or resumes.
DirLock claim_output_dir(const std::filesystem::path& out, bool overwrite, bool resuming);

// OUT/metrics.jsonl, one JSON object per line, each flushed: a kill loses at most the line
// being written.
class MetricsLog {
 public:
  MetricsLog() = default;  // writes nothing (the other ranks)
  // A new log, or after a resume from `resumed_step` > 0 the old one cut after that step's last
  // line (the lines of steps redone after the checkpoint, and a line torn by a kill, dropped).
  MetricsLog(const std::filesystem::path& out, int64_t resumed_step);
  void write(const nlohmann::json& line);
  bool active() const { return file_.is_open(); }

 private:
  std::filesystem::path path_;
  std::ofstream file_;
};

// Runs steps state.step + 1 ... o.max_steps; returns the state at the end (a smaller step when
// stopped on request). With rollback on a fresh start, checkpoint-0 is written first, so that
// there is always a checkpoint to go back to.
LoopState run_loop(const LoopOptions& o, LoopState state, const LoopHooks& hooks, MetricsLog& log);

}  // namespace bertlab

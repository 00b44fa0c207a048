#pragma once
// The one run loop of every kind of training (pretraining in runtime/trainer, fine-tuning in
// runtime/finetune): steps, evaluation, checkpoints every --save-steps in the verified format of
// runtime/checkpoint.h with the oldest pruned, metrics.jsonl, a stop on request (SIGINT,
// SIGTERM), and what to do when a step's loss or gradients are not finite. The caller supplies
// the step, the evaluation and its checkpoint contents as hooks; the setup around the loop
// (output directory, resume, metrics log) is runtime/run_setup.h.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/enum_table.h"

#include "base/dir_lock.h"
#include "base/error.h"

namespace bertlab {

// A micro-batch of a step (0-based within it) whose loss or gradients are not finite, and why
// ("step 5, micro-batch 1 of 3: the loss is not finite ...").
struct DroppedMicroBatch {
  int64_t micro = 0;
  std::string reason;
};

// A training step whose loss or gradients are not finite. The step's update was not applied:
// the parameters and optimizer moments are as they were before it. `at_fault`: the
// micro-batches found not finite (all of the step's when it is not known which).
struct NonfiniteError : Error {
  explicit NonfiniteError(const std::string& what, std::vector<DroppedMicroBatch> at_fault = {})
      : Error(what), at_fault(std::move(at_fault)) {}
  std::vector<DroppedMicroBatch> at_fault;
};

// --on-nonfinite: stop (the run ends with the error), skip (the micro-batches at fault are left
// out of the step's update, or the whole update is dropped when all are, and training goes on),
// rollback (back to the newest checkpoint, past the data that led there).
#define BERTLAB_ON_NONFINITE(X) X(stop, "stop") X(skip, "skip") X(rollback, "rollback")
BERTLAB_ENUM(OnNonfinite, uint8_t, BERTLAB_ON_NONFINITE)
// Throws Error naming `what` (the flag) and the accepted values.
OnNonfinite on_nonfinite_from_string(const std::string& s, const std::string& what = "--on-nonfinite");

// Test hook (--debug-nonfinite-batch STEP[:MICRO[:loss|grad]]): micro-batch `micro` (0-based;
// every one of the step when kEveryMicroBatch) of the data of step `data_step` (1-based, in the
// original order) gives a non-finite loss and gradients (`loss`), or finite loss and
// non-finite gradients (`gradients`, spelled grad in the flag), as a corrupted batch would.
#define BERTLAB_NONFINITE_KINDS(X) X(loss, "loss") X(gradients, "grad")
BERTLAB_ENUM(NonfiniteKind, uint8_t, BERTLAB_NONFINITE_KINDS)
struct NonfiniteInjection {
  static constexpr int64_t kEveryMicroBatch = -1;
  int64_t data_step = 1;
  int64_t micro = kEveryMicroBatch;
  NonfiniteKind kind = NonfiniteKind::loss;
  bool operator==(const NonfiniteInjection&) const = default;
};
// Parses STEP[:MICRO[:loss|grad]]; throws Error naming `what` (the flag) and the expected form.
NonfiniteInjection nonfinite_injection_from_string(const std::string& s,
                                                   const std::string& what = "--debug-nonfinite-batch");

struct NonfinitePolicy {
  OnNonfinite action = OnNonfinite::stop;
  // skip: micro-batches left out (a step skipped whole counts all of its micro-batches) within
  // any `window` consecutive steps; rollback: rollbacks per run.
  int64_t limit = 3;
  int64_t window = 100;  // steps (skip)
  std::vector<NonfiniteInjection> inject;  // test hook
};

// What the loop lets a step do about micro-batches that are not finite.
struct MicroBatchPolicy {
  // skip with accumulation: up to this many micro-batches may be left out of the update (the
  // rest of the window's allowance); 0: any non-finite micro-batch fails the step.
  int64_t may_drop = 0;
  std::vector<NonfiniteInjection> inject;  // test hook: those of this step's data
  // The injection, if any, into micro-batch k: nullptr when none.
  const NonfiniteInjection* injected(int64_t k) const;
};

// Where a run stands; saved in each checkpoint's trainer_state.json (field "loop") so that a
// resume continues exactly, rollbacks and skips included.
struct LoopState {
  int64_t step = 0;         // optimizer steps done
  int64_t data_offset = 0;  // steps' worth of data skipped by rollbacks: step t reads the data of t + offset
  int64_t rollbacks = 0;
  // One entry (its step) per micro-batch left out of an update, within the last window; a step
  // skipped whole has one entry per micro-batch.
  std::vector<int64_t> skipped;
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
  int64_t accum_steps = 1;       // micro-batches per step (to check the test hook's)
};

// Refuses options that cannot work before anything runs: rollback without checkpoints, an
// injected micro-batch the steps do not have.
void check_loop_options(const LoopOptions& o);

struct LoopEvent {
  // skipped: the step's update dropped; dropped: micro-batch `micro` left out of the step's update
  enum Kind { checkpoint, skipped, dropped, rolled_back, interrupted } kind = checkpoint;
  int64_t step = 0;
  std::string path;    // checkpoint: where it was written; rolled_back: the checkpoint returned to
  std::string reason;  // skipped, rolled_back: the error of the step; dropped: the micro-batch's
  int64_t micro = 0;   // dropped
};

// The line that reports an event ("saved OUT/checkpoint-4", "...: its update skipped (--on-nonfinite
// skip)"); `out`: the output directory (where an interrupted run resumes from).
std::string loop_event_text(const LoopEvent& e, const std::filesystem::path& out);

struct LoopHooks {
  // Optimizer step `step` on the data of step `data_step`; logs its own line. Returns the
  // micro-batches it left out of the update (at most `policy.may_drop`). Throws NonfiniteError
  // (with the update not applied) when the loss or gradients are not finite and it cannot
  // leave out the micro-batches at fault.
  std::function<std::vector<DroppedMicroBatch>(int64_t step, int64_t data_step, const MicroBatchPolicy& policy)> step;
  std::function<void(int64_t step)> evaluate;
  // Writes a complete checkpoint to `dir` (runtime/run_setup.h save_checkpoint) whose trainer
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

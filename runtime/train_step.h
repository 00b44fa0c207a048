#pragma once
// One optimizer step over K micro-batches on a training graph: zero the gradients once, run
// forward + backward per micro-batch (gradients accumulate), then the optimizer once. Under
// --on-nonfinite skip, micro-batches whose loss or gradients are not finite are left out
// (runtime/skip_micro_batches.h).
#include <span>
#include <string>
#include <vector>

#include "runtime/eval_diagnostics.h"
#include "runtime/executor.h"
#include "runtime/model.h"
#include "runtime/run_loop.h"

namespace bertlab {

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  float max_grad_norm = 1.0f;  // <= 0: no clipping
};

struct StepStats {
  double mlm_loss = 0, nsp_loss = 0;  // means over the whole accumulated batch
  double mlm_accuracy = 0;
  int64_t masked = 0, sequences = 0;
  double grad_norm = 0;  // before clipping
  std::vector<DroppedMicroBatch> dropped;  // micro-batches left out of the update (their losses too)
  double loss() const { return mlm_loss + nsp_loss; }
};

class TrainStepper {
 public:
  // Builds the training graph for micro-batches of `run.batch` x `run.seq` (run.mode = train).
  TrainStepper(Model& model, RunSpec run, OptimizerConfig opt, uint64_t seed);

  // One optimizer step (1-based `step`) with learning rate `lr`. Micro-batches of a shorter
  // sequence than run.seq (train --seq-len-warmup) run on a graph built for their length, with
  // the same parameters and optimizer state (single process only). Throws NonfiniteError naming the step
  // and the first non-finite tensor when the loss or a gradient is not finite; the parameters
  // are then left as they were before the step. With `policy.may_drop` > 0 and several
  // micro-batches, those at fault are left out instead (StepStats::dropped), as long as they are
  // not all of them nor more than may_drop (single process only).
  StepStats step(std::span<const BertInputs> micro_batches, int64_t step, float lr,
                 const MicroBatchPolicy& policy = {});
  // Losses of a batch without updating anything (no dropout). With `representation`, also adds
  // the batch's hidden-state cosines and attention entropies to it (runtime/eval_diagnostics.h),
  // from an evaluation graph that outputs them (mark_diagnostic_outputs); the training graph is
  // the same either way.
  StepStats evaluate(const BertInputs& batch, RepresentationSums* representation = nullptr);

  // From the next step on, the update of parameter `name` is multiplied by `factor` (1: as the
  // optimizer computes it). AdamW's and LAMB's updates, decoupled weight decay included, are
  // linear in the learning rate, so this is the step with that parameter's learning rate times
  // `factor` (a parameter group of its own, as torch.optim's).
  void set_update_scale(const std::string& name, float factor);

  Executor& executor() { return train_; }
  TrainingState& state() { return state_; }
  const RunSpec& run() const { return run_; }

 private:
  StepStats collect(Executor& ex, StepStats acc) const;
  // Zeroed gradients, then forward + backward of the micro-batches `use`, the losses divided by
  // their counts (over all ranks). Returns the finished statistics; `loss_reasons` gets, per
  // micro-batch of `use`, why its loss is not finite ("" when it is).
  StepStats accumulate(std::span<const BertInputs> micro, const std::vector<int64_t>& use,
                       const MicroBatchPolicy& policy, std::vector<std::string>& loss_reasons);

  // The optimizer update (and the allreduce before it), with the update scales applied.
  void update();
  // The training executor for micro-batches of this sequence length (train_, or shorter_).
  Executor& executor_for(int64_t seq);

  Model& model_;
  RunSpec run_;
  struct UpdateScale {
    std::string name;
    float factor = 1;
    std::vector<float> before;  // the parameter before the update
  };
  std::vector<UpdateScale> update_scales_;
  TrainingState state_;
  Executor train_;
  std::unique_ptr<Executor> shorter_;  // built for the first shorter sequence, again when it changes
  Executor* active_ = &train_;         // the executor of the current step
  std::unique_ptr<Executor> eval_;  // built on first evaluate(), again when the batch's shape changes
};

}  // namespace bertlab

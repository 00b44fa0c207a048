#include "runtime/train_step.h"

#include <cmath>

#include "ops/optimizer.h"
#include "runtime/bert_builder.h"
#include "runtime/distributed.h"
#include "base/error.h"
#include "runtime/fusion.h"

namespace bertlab {

namespace {
Graph training_graph(const BertConfig& c, RunSpec run) {
  run.mode = "train";
  run.heads = Heads::pretraining;
  Graph g = build_bert(c, run);
  apply_fusions(g);
  return g;
}
}  // namespace

TrainStepper::TrainStepper(Model& model, RunSpec run, OptimizerConfig opt, uint64_t seed)
    : model_(model),
      run_([&] {
        run.mode = "train";
        run.optimizer = opt.name;
        return run;
      }()),
      state_(model.params),
      train_(training_graph(model.config, run_), model.params, &state_) {
  auto& ctx = train_.context();
  ctx.seed = seed;
  ctx.beta1 = opt.beta1, ctx.beta2 = opt.beta2, ctx.eps = opt.eps;
  ctx.weight_decay = opt.weight_decay, ctx.max_grad_norm = opt.max_grad_norm;
}

StepStats TrainStepper::collect(Executor& ex, StepStats acc) const {
  const float* mlm = ex.output("mlm_loss");
  acc.mlm_loss += mlm[0];
  acc.mlm_accuracy += mlm[1];
  acc.masked += static_cast<int64_t>(mlm[2]);
  if (run_.nsp) {
    const float* nsp = ex.output("nsp_loss");
    acc.nsp_loss += nsp[0];
    acc.sequences += static_cast<int64_t>(nsp[2]);
  }
  return acc;
}

namespace {
StepStats finish(StepStats s) {
  s.mlm_loss = s.masked ? s.mlm_loss / s.masked : 0;
  s.mlm_accuracy = s.masked ? s.mlm_accuracy / s.masked : 0;
  s.nsp_loss = s.sequences ? s.nsp_loss / s.sequences : 0;
  return s;
}

// The first parameter whose gradient holds a NaN or an infinity.
std::string first_non_finite(const ParamStore& grads) {
  for (const auto& p : grads.params()) {
    const float* g = grads.data(p.name);
    for (int64_t i = 0, n = p.numel(); i < n; ++i)
      if (!std::isfinite(g[i])) return p.name;
  }
  return "(none)";
}
}  // namespace

StepStats TrainStepper::step(std::span<const BertInputs> micro, int64_t step, float lr) {
  check(!micro.empty(), "a training step needs at least one micro-batch");
  auto& ctx = train_.context();
  auto& world = dist::World::get();
  // Data parallel: the losses are divided by the counts of the whole batch over all ranks.
  double counts[2] = {0, 0};  // masked tokens, sequences
  for (const auto& mb : micro) counts[0] += double(mb.masked_count()), counts[1] += double(mb.batch);
  world.allreduce_sum(counts, 2);
  ctx.step = step;
  ctx.lr = lr;
  ctx.mlm_denominator = static_cast<float>(std::max(counts[0], 1.0));
  ctx.nsp_denominator = static_cast<float>(counts[1]);
  state_.grads.zero();
  // The weights stay fixed until the update: with accumulation, each GEMM packs (and casts)
  // them on the first micro-batch only.
  ctx.weights_version = micro.size() > 1 ? next_weights_version() : 0;
  StepStats stats;
  for (size_t k = 0; k < micro.size(); ++k) {
    // Each rank's micro-batches draw their own dropout masks.
    ctx.micro = static_cast<int64_t>(world.rank() * micro.size() + k);
    ctx.sync_gradients = k + 1 == micro.size();  // only the last backward starts the allreduce
    set_inputs(train_, micro[k]);
    train_.run(nullptr, kForward | kBackward);
    stats = collect(train_, stats);
  }
  double sums[5] = {stats.mlm_loss, stats.mlm_accuracy, double(stats.masked), stats.nsp_loss,
                    double(stats.sequences)};
  world.allreduce_sum(sums, 5);
  stats.mlm_loss = sums[0], stats.mlm_accuracy = sums[1], stats.nsp_loss = sums[3];
  stats.masked = static_cast<int64_t>(sums[2]), stats.sequences = static_cast<int64_t>(sums[4]);
  stats = finish(stats);
  if (!std::isfinite(stats.loss()))
    throw NonfiniteError(fmt::format("step {}: the loss is not finite (masked LM {}, NSP {})", step, stats.mlm_loss,
                                     stats.nsp_loss));
  train_.run(nullptr, kCommunication | kOptimizer);  // the gradient allreduce, then the update
  stats.grad_norm = ctx.grad_norm;
  // Not check(): its arguments are evaluated every step, and this one scans the whole arena.
  if (!std::isfinite(ctx.grad_norm))
    throw NonfiniteError(
        fmt::format("step {}: gradients are not finite; first: grad of '{}'", step, first_non_finite(state_.grads)));
  return stats;
}

StepStats TrainStepper::evaluate(const BertInputs& batch) {
  // The evaluation data may differ from the training data in batch, sequence length and
  // masked positions per sequence (train --eval-data, e.g. 15% masking against 40% in training).
  // The graph's own input shapes say what it was built for.
  auto built_for = [&](const char* input) { return eval_->graph().tensor(eval_->graph().tensor_id(input)).shape; };
  if (!eval_ || built_for("input_ids") != Shape{batch.batch, batch.seq} ||
      built_for("masked_lm_positions") != Shape{batch.batch, batch.max_predictions}) {
    RunSpec r = run_;
    r.dropout = false;
    r.batch = batch.batch;
    r.seq = batch.seq;
    r.max_predictions = batch.max_predictions;
    eval_ = std::make_unique<Executor>(training_graph(model_.config, r), model_.params, &state_);
  }
  set_inputs(*eval_, batch);
  eval_->run(nullptr, kForward);
  return finish(collect(*eval_, {}));
}

}  // namespace bertlab

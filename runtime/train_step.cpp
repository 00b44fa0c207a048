#include "runtime/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/optimizer.h"
#include "runtime/bert_builder.h"
#include "runtime/distributed.h"
#include "base/error.h"
#include "runtime/fusion.h"
#include "runtime/skip_micro_batches.h"

namespace bertlab {

namespace {
// `diagnostics`: an evaluation graph that also outputs what the plateau diagnostics read.
Graph training_graph(const BertConfig& c, RunSpec run, bool diagnostics = false) {
  run.mode = RunMode::train;
  run.heads = Heads::pretraining;
  Graph g = build_bert(c, run);
  if (diagnostics) mark_diagnostic_outputs(g, c);
  apply_fusions(g);
  return g;
}
}  // namespace

TrainStepper::TrainStepper(Model& model, RunSpec run, OptimizerConfig opt, uint64_t seed)
    : model_(model),
      run_([&] {
        run.mode = RunMode::train;
        run.optimizer = opt.kind;
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

}  // namespace

StepStats TrainStepper::accumulate(std::span<const BertInputs> micro, const std::vector<int64_t>& use,
                                   const MicroBatchPolicy& policy, std::vector<std::string>& loss_reasons) {
  auto& ctx = active_->context();
  auto& world = dist::World::get();
  // Data parallel: the losses are divided by the counts of the whole batch over all ranks.
  double counts[2] = {0, 0};  // masked tokens, sequences
  for (int64_t k : use) counts[0] += double(micro[k].masked_count()), counts[1] += double(micro[k].batch);
  world.allreduce_sum(counts, 2);
  const float mlm_denominator = static_cast<float>(std::max(counts[0], 1.0));
  const float nsp_denominator = static_cast<float>(counts[1]);
  state_.grads.zero();
  loss_reasons.clear();
  StepStats stats;
  for (size_t i = 0; i < use.size(); ++i) {
    const int64_t k = use[i];
    // Each rank's micro-batches draw their own dropout masks; a micro-batch keeps its own when
    // others of the step are left out.
    ctx.micro = static_cast<int64_t>(world.rank() * micro.size()) + k;
    ctx.sync_gradients = i + 1 == use.size();  // only the last backward starts the allreduce
    // The test hook: a NaN denominator makes every gradient of the micro-batch NaN.
    const NonfiniteInjection* injected = policy.injected(k);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    ctx.mlm_denominator = injected ? nan : mlm_denominator;
    ctx.nsp_denominator = injected ? nan : nsp_denominator;
    set_inputs(*active_, micro[k]);
    active_->run(nullptr, kForward | kBackward);
    StepStats one = collect(*active_, {});
    if (injected && injected->kind == NonfiniteKind::loss) one.mlm_loss = nan;
    const StepStats mean = finish(one);
    loss_reasons.push_back(std::isfinite(one.mlm_loss) && std::isfinite(one.nsp_loss)
                               ? ""
                               : fmt::format("the loss is not finite (masked LM {}, NSP {})", mean.mlm_loss, mean.nsp_loss));
    stats.mlm_loss += one.mlm_loss, stats.mlm_accuracy += one.mlm_accuracy, stats.masked += one.masked;
    stats.nsp_loss += one.nsp_loss, stats.sequences += one.sequences;
  }
  double sums[5] = {stats.mlm_loss, stats.mlm_accuracy, double(stats.masked), stats.nsp_loss,
                    double(stats.sequences)};
  world.allreduce_sum(sums, 5);
  stats.mlm_loss = sums[0], stats.mlm_accuracy = sums[1], stats.nsp_loss = sums[3];
  stats.masked = static_cast<int64_t>(sums[2]), stats.sequences = static_cast<int64_t>(sums[4]);
  return finish(stats);
}

void TrainStepper::set_update_scale(const std::string& name, float factor) {
  check(model_.params.contains(name), "no parameter '{}' to scale the update of", name);
  for (auto& s : update_scales_)
    if (s.name == name) return void(s.factor = factor);
  update_scales_.push_back({name, factor, {}});
}

void TrainStepper::update() {
  for (auto& s : update_scales_)
    if (s.factor != 1) {
      const float* p = model_.params.data(s.name);
      s.before.assign(p, p + model_.params.info(s.name).numel());
    }
  active_->run(nullptr, kCommunication | kOptimizer);  // the gradient allreduce, then the update
  for (auto& s : update_scales_) {
    if (s.factor == 1) continue;
    float* p = model_.params.data(s.name);
    for (size_t i = 0; i < s.before.size(); ++i) p[i] = s.before[i] + s.factor * (p[i] - s.before[i]);
  }
}

Executor& TrainStepper::executor_for(int64_t seq) {
  if (seq == run_.seq) return train_;
  check(seq > 0 && seq < run_.seq, "micro-batches of sequence length {}: expected at most {}", seq, run_.seq);
  check(dist::World::get().size() == 1, "shorter sequences (sequence-length warmup) need a single process");
  if (!shorter_ || shorter_->graph().tensor(shorter_->graph().tensor_id("input_ids")).shape[1] != seq) {
    RunSpec r = run_;
    r.seq = seq;
    shorter_ = std::make_unique<Executor>(training_graph(model_.config, r), model_.params, &state_);
    shorter_->context() = train_.context();  // seed and optimizer settings
  }
  return *shorter_;
}

StepStats TrainStepper::step(std::span<const BertInputs> micro, int64_t step, float lr, const MicroBatchPolicy& policy) {
  check(!micro.empty(), "a training step needs at least one micro-batch");
  for (const auto& m : micro)
    check(m.seq == micro.front().seq, "the micro-batches of a step have sequence lengths {} and {}", micro.front().seq, m.seq);
  active_ = &executor_for(micro.front().seq);
  auto& ctx = active_->context();
  const int64_t K = static_cast<int64_t>(micro.size());
  // Leaving out micro-batches: only with more than one, and in one process (every rank would
  // have to leave out the same ones).
  const bool may_drop = policy.may_drop > 0 && K > 1;
  check(!may_drop || dist::World::get().size() == 1,
        "--on-nonfinite skip: a data-parallel run cannot leave out micro-batches");
  ctx.step = step;
  ctx.lr = lr;
  // The weights stay fixed until the update: with accumulation, each GEMM packs (and casts)
  // them on the first micro-batch only (and keeps them when micro-batches are run again).
  ctx.weights_version = K > 1 ? next_weights_version() : 0;
  std::vector<int64_t> all(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) all[k] = k;
  std::vector<std::string> loss_reasons;
  StepStats stats = accumulate(micro, all, policy, loss_reasons);
  AccumulationParts parts;
  parts.accumulate = [&](const std::vector<int64_t>& use) {
    std::vector<std::string> reasons;
    stats = accumulate(micro, use, policy, reasons);
    return reasons;
  };
  parts.update = [&] {
    update();
    return std::isfinite(ctx.grad_norm);
  };
  parts.first_non_finite_gradient = [&] { return first_non_finite(state_.grads); };
  std::vector<DroppedMicroBatch> dropped = update_unless_non_finite(
      step, K, std::isfinite(stats.loss()), loss_reasons, may_drop ? policy.may_drop : 0, parts,
      [&] { return fmt::format("step {}: the loss is not finite (masked LM {}, NSP {})", step, stats.mlm_loss, stats.nsp_loss); },
      [&] {
        // Not check(): its arguments are evaluated every step, and this one scans the whole arena.
        const std::string first = first_non_finite(state_.grads);
        return fmt::format("step {}: gradients are not finite; first: grad of '{}'", step, first.empty() ? "(none)" : first);
      });
  stats.grad_norm = ctx.grad_norm;
  stats.dropped = std::move(dropped);
  return stats;
}

StepStats TrainStepper::evaluate(const BertInputs& batch, RepresentationSums* representation) {
  // The evaluation data may differ from the training data in batch, sequence length and
  // masked positions per sequence (train --eval-data, e.g. 15% masking against 40% in training).
  // The graph's own input shapes say what it was built for, and its outputs whether it keeps
  // what the diagnostics read.
  auto built_for = [&](const char* input) { return eval_->graph().tensor(eval_->graph().tensor_id(input)).shape; };
  auto diagnostic = [&] {  // a training graph outputs last_hidden_state only when marked so
    const auto& outs = eval_->graph().outputs();
    return std::any_of(outs.begin(), outs.end(), [](const auto& o) { return o.first == "last_hidden_state"; });
  };
  if (!eval_ || built_for("input_ids") != Shape{batch.batch, batch.seq} ||
      built_for("masked_lm_positions") != Shape{batch.batch, batch.max_predictions} ||
      diagnostic() != (representation != nullptr)) {
    RunSpec r = run_;
    r.dropout = false;
    r.batch = batch.batch;
    r.seq = batch.seq;
    r.max_predictions = batch.max_predictions;
    eval_ = std::make_unique<Executor>(training_graph(model_.config, r, representation != nullptr), model_.params,
                                       &state_);
  }
  set_inputs(*eval_, batch);
  eval_->run(nullptr, kForward);
  if (representation) {
    const int64_t B = batch.batch, S = batch.seq, H = model_.config.hidden_size;
    const int32_t* mask = batch.attention_mask.data();
    add_position_cosines(*representation, eval_->output("last_hidden_state"), mask, B, S, H);
    for (int64_t l = 0; l < model_.config.num_hidden_layers; ++l)
      add_attention_entropy(*representation, l, eval_->output(fmt::format("attention_probs.{}", l)), mask, B,
                            model_.config.num_attention_heads, S);
  }
  return finish(collect(*eval_, {}));
}

}  // namespace bertlab

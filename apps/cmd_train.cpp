// bertlab train: MLM + NSP pretraining with flags a Hugging Face run_mlm.py user recognises.
#include <fmt/core.h>

#include <atomic>
#include <cstdio>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "base/error.h"
#include "runtime/trainer.h"

namespace bertlab::app {

namespace {

std::string clock_str(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

struct TrainCli {
  TrainOptions o;
  std::string config, model, data, eval_data, out, resume;
  int threads = 0;
  double bucket_mb = 25;
  std::string allreduce_dtype = "fp32";
  std::string on_nonfinite = "stop";
  std::string schedule = "linear";
  std::string position_init = "normal";
  std::string seq_len_warmup;
  std::vector<std::string> inject_nonfinite;  // --debug-nonfinite-batch
};

// A value of enum E, by name (the error lists the accepted ones).
template <typename E>
std::function<std::string(const std::string&)> one_of() {
  return [](const std::string& v) {
    return enum_parse<E>(v) ? std::string()
                            : fmt::format("unknown value '{}' (expected one of: {})", v, fmt::join(enum_names(E{}), ", "));
  };
}

// The pretraining recipe's options (docs/training.md#pretraining-recipe).
void add_recipe_options(CLI::App& cmd, TrainCli& c) {
  auto& o = c.o;
  cmd.add_option("--lr-schedule", c.schedule,
                 "linear, polynomial or constant after warmup; one-cycle: linear up to the peak at --warmup-steps "
                 "(default: half of --max-steps), then linearly down to 0; wsd (warmup-stable-decay): held at the "
                 "peak after warmup, then linearly down over the last --decay-steps")
      ->check(one_of<LrSchedule>());
  cmd.add_option("--decay-steps", o.decay_steps, "wsd: steps of the linear decay at the end")->check(non_negative_number());
  cmd.add_option("--decay-ratio", o.decay_ratio, "wsd: the decay as a fraction of --max-steps (instead of --decay-steps)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-lr-ratio", o.min_lr_ratio, "wsd: the decay ends at --lr x this (default 0)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--position-init", c.position_init,
                 "The position table of a new model: normal (BERT's init) or sinusoidal (scaled sin/cos)")
      ->check(one_of<PositionInit>());
  cmd.add_option("--position-init-scale", o.position_init_scale,
                 "Amplitude of the sinusoidal position table (default: 2 x initializer_range of the config)")
      ->check(non_negative_number());
  cmd.add_option("--position-lr-scale", o.position_lr_scale,
                 "The position table's learning rate x this for the first --position-lr-steps steps")
      ->check(non_negative_number());
  cmd.add_option("--position-lr-steps", o.position_lr_steps, "Steps of --position-lr-scale")->check(non_negative_number());
  cmd.add_option("--residual-scale", o.residual_scale,
                 "Train LN(A x + G(x)) in every sub-layer (DeepNorm/Admin); checkpoints hold the plain BERT it equals")
      ->check(positive_number());
  cmd.add_option("--seq-len-warmup", c.seq_len_warmup,
                 "STEPS:LEN: the first STEPS steps train on the first LEN tokens of each sequence (prepare --pack data)");
  cmd.add_option("--masked-lm-prob", o.masked_lm_prob,
                 "With --dynamic-masking: mask this fraction of the tokens instead of the data's rate");
  cmd.add_option("--masked-lm-prob-final", o.masked_lm_prob_final,
                 "The masking rate at the last step: linearly from --masked-lm-prob to this over the run");
}

void parse_recipe_options(const TrainCli& c, TrainOptions& o) {
  o.schedule = enum_from_string<LrSchedule>(c.schedule, "--lr-schedule");
  o.position_init = enum_from_string<PositionInit>(c.position_init, "--position-init");
  if (!c.seq_len_warmup.empty()) {
    const auto colon = c.seq_len_warmup.find(':');
    int64_t steps = 0, len = 0;
    const bool ok = colon != std::string::npos && CLI::detail::lexical_cast(c.seq_len_warmup.substr(0, colon), steps) &&
                    CLI::detail::lexical_cast(c.seq_len_warmup.substr(colon + 1), len) && steps > 0 && len > 0;
    if (!ok) fail("--seq-len-warmup {}: expected STEPS:LEN, two positive integers", c.seq_len_warmup);
    o.seq_len_warmup_steps = steps, o.seq_len_warmup_len = len;
  }
}

}  // namespace

void add_train_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("train", "Pretrain BERT (masked LM + next sentence) on prepared data");
  auto c = std::make_shared<TrainCli>();
  auto& o = c->o;
  cmd->add_option("--config", c->config, "config.json of a new model");
  cmd->add_option("--model", c->model, "Start from this model directory");
  cmd->add_option("--data", c->data, "Prepared data directory (bertlab prepare)")->required();
  cmd->add_option("--eval-data", c->eval_data, "Data directory for evaluation (default: --data)");
  cmd->add_option("--out", c->out, "Output directory (checkpoints, final model, metrics.jsonl)")->required();
  cmd->add_option("--resume", c->resume, "Continue from a checkpoint directory ('latest': the newest complete one in --out)");
  cmd->add_flag("--overwrite", o.overwrite, "Replace an existing output directory");
  cmd->add_option("--max-steps", o.max_steps, "Optimizer steps")->check(positive_number());
  cmd->add_option("--batch-size", o.batch_size, "Sequences per micro-batch")->check(positive_number());
  cmd->add_option("--accum-steps", o.accum_steps, "Micro-batches per optimizer step")->check(positive_number());
  cmd->add_option("--seq-len", o.seq_len, "Sequence length (must match the data)");
  cmd->add_option("--lr", o.lr, "Peak learning rate")->check(positive_number());
  cmd->add_option("--warmup-steps", o.warmup_steps, "Linear warmup steps")->check(non_negative_number());
  add_recipe_options(*cmd, *c);
  cmd->add_flag("--no-nsp{false}", o.nsp, "Masked LM only: no next-sentence head or loss (needed for prepare --pack data)");
  cmd->add_flag("--no-dropout{false}", o.dropout,
                "No dropout while pretraining (the saved config keeps its dropout probabilities for fine-tuning)");
  cmd->add_option("--power", o.power, "Power of the polynomial decay");
  cmd->add_option("--weight-decay", o.optimizer.weight_decay, "Decoupled weight decay")->check(non_negative_number());
  add_enum_option(*cmd, "--optimizer", o.optimizer.kind, "adamw or lamb");
  cmd->add_option("--adam-beta1", o.optimizer.beta1, "First-moment decay");
  cmd->add_option("--adam-beta2", o.optimizer.beta2, "Second-moment decay");
  cmd->add_option("--adam-epsilon", o.optimizer.eps, "Denominator epsilon");
  cmd->add_option("--max-grad-norm", o.optimizer.max_grad_norm, "Global gradient-norm clip (0: off)");
  cmd->add_option("--seed", o.seed, "Seed (initialisation, data order, dropout)");
  cmd->add_flag("--dynamic-masking", o.dynamic_masking, "Re-mask every epoch");
  cmd->add_option("--save-steps", o.save_steps, "Checkpoint every N steps (0: at the end)");
  cmd->add_option("--save-total-limit", o.save_total_limit, "Checkpoints kept");
  cmd->add_option("--log-steps", o.log_steps, "Progress line every N steps");
  cmd->add_option("--eval-steps", o.eval_steps, "Evaluate every N steps (0: at the end)");
  cmd->add_option("--eval-batches", o.eval_batches, "Batches per evaluation");
  cmd->add_flag("--no-eval-diagnostics{false}", o.eval_diagnostics,
                "Evaluate the held-out losses and accuracy alone: no neighbour yardsticks, hidden-state cosine or "
                "attention entropy (docs/training.md)");
  add_nonfinite_options(*cmd, o.nonfinite, c->on_nonfinite, c->inject_nonfinite);
  add_threads_option(*cmd, c->threads);
  add_precision_option(*cmd, o.precision);
  // Data parallel (mpirun -np N): how the gradient allreduce runs (runtime/grad_sync.h).
  cmd->add_option("--bucket-mb", c->bucket_mb, "Gradient allreduce bucket size in MiB (default 25, as PyTorch DDP)")
      ->check([](const std::string& v) {
        double mb = 0;
        return CLI::detail::lexical_cast(v, mb) && mb > 0 && mb <= 1 << 20
                   ? std::string()
                   : fmt::format("--bucket-mb {}: expected a size in MiB above 0 (and at most 1048576)", v);
      });
  cmd->add_flag("--no-overlap{false}", o.allreduce.overlap,
                "Allreduce all gradients after backward instead of bucket by bucket during it");
  cmd->add_option("--allreduce-dtype", c->allreduce_dtype, "fp32, or bf16: gradients rounded to bf16 on the wire")
      ->check([](const std::string& v) {
        return enum_parse<Precision>(v) ? std::string()
                                        : fmt::format("unknown value '{}' (expected one of: {})", v,
                                                      fmt::join(enum_names(Precision{}), ", "));
      });
  cmd->callback([c] {
    set_threads(c->threads);
    TrainOptions o = c->o;
    o.allreduce.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(c->bucket_mb * (1 << 20)));
    o.allreduce.wire = precision_from_string(c->allreduce_dtype, "--allreduce-dtype");
    o.config = c->config, o.model = c->model, o.data = c->data, o.eval_data = c->eval_data;
    o.out = c->out, o.resume = c->resume;
    parse_recipe_options(*c, o);
    parse_nonfinite_options(c->on_nonfinite, c->inject_nonfinite, o.nonfinite);
    const std::atomic<bool>* stop = stop_on_signals();
    const bool tty = isatty(fileno(stderr));
    // "loss L (mlm M, nsp N)"; masked LM only (--no-nsp) has no NSP loss to print.
    auto losses = [&](const StepStats& s) {
      return o.nsp ? fmt::format("loss {:.4f} (mlm {:.4f}, nsp {:.4f})", s.loss(), s.mlm_loss, s.nsp_loss)
                   : fmt::format("loss {:.4f} (mlm)", s.loss());
    };
    auto on_event = [&](const TrainEvent& e) {
      switch (e.kind) {
        case TrainEvent::step: {
          // Every step rewrites the live line on a terminal; every --log-steps (and the last)
          // step is kept as a line of its own, which is all that is printed to a pipe.
          const bool keep = o.log_steps > 0 && (e.step_index % o.log_steps == 0 || e.step_index == e.max_steps);
          report_step({e.step_index, e.max_steps, e.stats.loss(), e.lr, e.seq_per_s,
                       {{"mlm_loss", e.stats.mlm_loss}, {"nsp_loss", e.stats.nsp_loss}, {"mlm_accuracy", e.stats.mlm_accuracy}},
                       keep});
          if (!tty && !keep) return;
          const auto line = fmt::format("step {}/{}  {}  mlm acc {:.3f}  lr {:.2e}  {:.2f} seq/s  eta {}",
                                        e.step_index, e.max_steps, losses(e.stats), e.stats.mlm_accuracy, e.lr,
                                        e.seq_per_s, clock_str(e.eta_s));
          fmt::print(stderr, "{}{}{}", tty ? "\r\033[K" : "", line, keep ? "\n" : "");
          return;
        }
        case TrainEvent::eval:
          fmt::print(stderr, "eval at step {}: {}  mlm acc {:.3f} (most frequent token: {:.3f}", e.step_index,
                     losses(e.stats), e.stats.mlm_accuracy, e.baseline_accuracy);
          if (const auto& p = e.plateau)
            fmt::print(stderr, "; neighbours: left {:.3f}, right {:.3f}, both {:.3f})  hidden cosine {:.3f}  "
                               "attention entropy {:.3f} nats\n",
                       p->left_accuracy, p->right_accuracy, p->both_accuracy, p->hidden_cosine, p->attention_entropy);
          else
            fmt::print(stderr, ")\n");
          return;
        case TrainEvent::yardsticks:
          fmt::print(stderr, "neighbour yardsticks: {} training tokens counted in {:.2f} s\n", e.tokens, e.seconds);
          return;
        case TrainEvent::checkpoint:
        case TrainEvent::skipped:
        case TrainEvent::dropped:
        case TrainEvent::rolled_back:
        case TrainEvent::interrupted:
          fmt::print(stderr, "{}\n", e.text);
          return;
      }
    };
    int64_t last = train(o, on_event, stop);
    fmt::print(stderr, "done: {} steps; model in {}\n", last, o.out.string());
  });
}

}  // namespace bertlab::app

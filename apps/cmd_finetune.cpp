// bertlab finetune / predict: sequence and token classification with run_glue.py / run_ner.py
// flags, and prediction with the fine-tuned model.
#include <fmt/core.h>

#include <cstdio>
#include <unistd.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "base/error.h"
#include "runtime/finetune.h"

namespace bertlab::app {

namespace {

struct FinetuneCli {
  FinetuneOptions o;
  std::string task, model, train, eval, test, out, resume, metric = "accuracy", on_nonfinite = "stop";
  std::vector<std::string> inject_nonfinite;  // --debug-nonfinite-batch
  int threads = 0;
};

void print_eval(const EvalResult& r, const char* what) {
  fmt::print("{}: accuracy {:.4f}  macro-F1 {:.4f}  loss {:.4f}  ({} items; majority class {:.4f})\n", what,
             r.accuracy, r.macro_f1, r.loss, r.count, r.majority_accuracy);
}

}  // namespace

void add_finetune_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("finetune", "Fine-tune a BERT model for sequence or token classification");
  auto c = std::make_shared<FinetuneCli>();
  auto& o = c->o;
  constexpr auto task_array = enum_names(data::TaskKind{});
  const std::vector<std::string> task_names(task_array.begin(), task_array.end());
  cmd->add_option("--task", c->task, "seq-cls (text[, text_pair], label) or token-cls (CoNLL word<TAB>tag)")
      ->required()->check(CLI::IsMember(task_names));
  cmd->add_option("--model", c->model, "bertlab or Hugging Face model directory (config.json, model.safetensors, vocab.txt)")->required();
  cmd->add_option("--train", c->train, "Training file (.csv, .tsv, .jsonl; CoNLL for token-cls)")->required();
  cmd->add_option("--eval", c->eval, "Evaluation file, same format")->required();
  cmd->add_option("--test", c->test,
                  "Test file, same format: scored once with the kept model after the last step (test_results.json); "
                  "no choice of the run looks at it");
  cmd->add_option("--out", c->out, "Output directory (best model, eval_results.json, metrics.jsonl)")->required();
  cmd->add_flag("--overwrite", o.overwrite, "Replace an existing output directory");
  cmd->add_option("--resume", c->resume,
                  "Continue from a fine-tuning checkpoint directory ('latest': the newest complete one in --out); "
                  "the other flags must be those of the run that wrote it");
  cmd->add_option("--save-steps", o.save_steps, "Checkpoint every N steps and at the end (0: no checkpoints)")
      ->check(non_negative_number())->capture_default_str();
  cmd->add_option("--save-total-limit", o.save_total_limit, "Checkpoints kept (0: all)")
      ->check(non_negative_number())->capture_default_str();
  cmd->add_option("--learning-rate", o.lr, "Peak learning rate")->check(positive_number())->capture_default_str();
  cmd->add_option("--num-train-epochs", o.epochs, "Epochs (unless --max-steps)")->capture_default_str();
  cmd->add_option("--max-steps", o.max_steps, "Optimizer steps (overrides --num-train-epochs)");
  cmd->add_option("--warmup-steps", o.warmup_steps, "Linear warmup steps")->check(non_negative_number());
  cmd->add_option("--warmup-ratio", o.warmup_ratio, "Warmup as a fraction of the steps")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--batch-size", o.batch_size, "Examples per micro-batch")->check(positive_number())->capture_default_str();
  cmd->add_option("--accum-steps", o.accum_steps, "Micro-batches per optimizer step")->check(positive_number());
  cmd->add_option("--max-seq-length", o.max_seq_length, "Longer examples are truncated (and counted)")
      ->check(CLI::Range(4, 1 << 20))->capture_default_str();
  cmd->add_option("--eval-max-seq-length", o.eval_max_seq_length, "The same for the evaluation file (default: --max-seq-length)")
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--weight-decay", o.optimizer.weight_decay, "Decoupled weight decay")->check(non_negative_number());
  cmd->add_option("--max-grad-norm", o.optimizer.max_grad_norm, "Gradient-norm clip (0: off)");
  cmd->add_option("--eval-steps", o.eval_steps, "Evaluate every N steps (0: every epoch)");
  cmd->add_option("--log-steps", o.log_steps, "Progress line every N steps");
  cmd->add_option("--seed", o.seed, "Seed (classifier initialisation, data order, dropout)");
  constexpr auto metric_array = enum_names(FinetuneMetric{});
  const std::vector<std::string> metric_names(metric_array.begin(), metric_array.end());
  cmd->add_option("--metric", c->metric, "Metric that picks the best checkpoint")
      ->check(CLI::IsMember(metric_names))->capture_default_str();
  cmd->add_flag("--group-by-length", o.group_by_length,
                "Batches of similar lengths, each padded to its own longest example (rounded up to a quarter of "
                "--max-seq-length), as Hugging Face's group_by_length");
  cmd->add_flag("--from-scratch", o.from_scratch, "Random initial weights (a control for the gain from pretraining)");
  cmd->add_option("--threads", c->threads, "Compute threads (default: all cores)")->check(positive_number());
  add_precision_option(*cmd, o.precision);
  add_nonfinite_options(*cmd, o.nonfinite, c->on_nonfinite, c->inject_nonfinite);
  cmd->callback([c] {
    set_threads(c->threads);
    FinetuneOptions o = c->o;
    o.task = enum_from_string<data::TaskKind>(c->task, "--task");
    o.model = c->model, o.train = c->train, o.eval = c->eval, o.out = c->out, o.resume = c->resume;
    o.test = c->test;
    parse_nonfinite_options(c->on_nonfinite, c->inject_nonfinite, o.nonfinite);
    const std::atomic<bool>* stop = stop_on_signals();
    o.metric = enum_from_string<FinetuneMetric>(c->metric, "--metric");
    const bool tty = isatty(fileno(stderr));
    auto on_event = [&](const FinetuneEvent& e) {
      switch (e.kind) {
        case FinetuneEvent::message:
          fmt::print(stderr, "finetune: {}\n", e.text);
          return;
        case FinetuneEvent::step: {
          const bool keep = o.log_steps > 0 && (e.step_index % o.log_steps == 0 || e.step_index == e.max_steps);
          report_step({e.step_index, e.max_steps, e.loss, e.lr, e.seq_per_s, {{"accuracy", e.accuracy}}, keep});
          if (!tty && !keep) return;
          fmt::print(stderr, "{}step {}/{}  loss {:.4f}  acc {:.3f}  lr {:.2e}  {:.1f} seq/s  eta {:.0f} s{}",
                     tty ? "\r\033[K" : "", e.step_index, e.max_steps, e.loss, e.accuracy, e.lr, e.seq_per_s,
                     e.eta_s, keep ? "\n" : "");
          return;
        }
        case FinetuneEvent::evaluation:
          fmt::print(stderr, "{}eval at step {}: accuracy {:.4f}  macro-F1 {:.4f}  loss {:.4f}{}\n", tty ? "\r\033[K" : "",
                     e.step_index, e.eval.accuracy, e.eval.macro_f1, e.eval.loss, e.best ? "  (best)" : "");
          return;
      }
    };
    FinetuneResult r = finetune(o, on_event, stop);
    if (r.interrupted) return;
    fmt::print("finetune: best model (step {} of {}) in {}\n", r.best_step, r.steps, o.out.string());
    print_eval(r.best, "eval");
    if (r.test) print_eval(*r.test, "test");
    fmt::print("{:<16} {:>9} {:>9} {:>9} {:>8}\n", "label", "precision", "recall", "f1", "support");
    for (const auto& k : r.best.per_class)
      fmt::print("{:<16} {:>9.4f} {:>9.4f} {:>9.4f} {:>8}\n", k.label, k.precision, k.recall, k.f1, k.support);
    if (o.group_by_length)
      fmt::print("training throughput: {:.1f} seq/s at batch {}, grouped by length: {} graphs, mean padded length {:.1f} of {}\n",
                 r.train_seq_per_s, o.batch_size, r.graphs, r.mean_padded_length, r.seq_len);
    else
      fmt::print("training throughput: {:.1f} seq/s at batch {} x seq {}\n", r.train_seq_per_s, o.batch_size, r.seq_len);
  });
}

void add_predict_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("predict", "Labels and probabilities from a fine-tuned model");
  auto o = std::make_shared<PredictOptions>();
  auto model = std::make_shared<std::string>(), input = std::make_shared<std::string>(),
       output = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  cmd->add_option("--model", *model, "Fine-tuned model directory (bertlab finetune)")->required();
  cmd->add_option("--input", *input, "Texts (.csv, .tsv, .jsonl; a label column is optional) or CoNLL words")->required();
  cmd->add_option("--output", *output, "JSON lines: one object per example")->required();
  cmd->add_option("--batch-size", o->batch_size, "Examples per batch")->check(positive_number());
  cmd->add_option("--max-seq-length", o->max_seq_length, "Longer examples are truncated (and counted)")
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--threads", *threads, "Compute threads (default: all cores)")->check(positive_number());
  cmd->callback([=] {
    set_threads(*threads);
    PredictOptions p = *o;
    p.model = *model, p.input = *input, p.output = *output;
    const int64_t n = predict(p, [](const std::string& m) { fmt::print(stderr, "predict: {}\n", m); });
    fmt::print("predict: {} examples -> {}\n", n, p.output.string());
  });
}

}  // namespace bertlab::app

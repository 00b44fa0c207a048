// bertlab prepare: corpus -> BERT pretraining instances (NSP pairs, masked LM) in shards.
#include <fmt/core.h>

#include <chrono>
#include <optional>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/data_progress.h"
#include "data/corpus.h"
#include "data/downstream.h"
#include "data/pretraining.h"
#include "data/shard.h"
#include "base/error.h"

namespace bertlab::app {

namespace {
struct PrepareCommandOptions {
  std::string corpus, vocab, out, format = "auto", verify, task;
  data::PrepareOptions prepare;
  int threads = 0;
  double validation_fraction = 0;
};

// --verify DIR: open every shard of both splits (magic, version, sizes, checksum, records).
void run_verify(const std::string& dir) {
  for (const char* split : {"train", "eval"}) {
    auto ds = data::PretrainingDataset::open(dir, split, {});
    fmt::print("prepare: {}: {} {} instances, seq len {}, verified\n", dir, ds.size(), split, ds.seq_len());
  }
}

// --task pos|genre: labelled data for `bertlab finetune` from the Brown corpus, held out like
// pretraining, with the baselines a fine-tuned model must beat.
void run_prepare_task(const PrepareCommandOptions& o) {
  check(!o.corpus.empty() && !o.out.empty(), "prepare --task needs --corpus (brown) and --out");
  const auto task = enum_from_string<data::DownstreamTask>(o.task, "--task");
  std::optional<data::BertTokenizer> tok;
  if (!o.vocab.empty()) tok.emplace(data::BertTokenizer::load(o.vocab));
  data::DownstreamOptions d;
  d.eval_fraction = o.prepare.eval_fraction, d.seed = o.prepare.seed, d.overwrite = o.prepare.overwrite;
  d.max_tokens = static_cast<std::size_t>(o.prepare.max_seq_length);
  d.validation_fraction = o.validation_fraction;
  auto st = data::prepare_downstream(data::resolve_corpus(o.corpus), task, tok ? &*tok : nullptr, d, o.out);
  const char* unit = task == data::DownstreamTask::pos ? "sentences" : "chunks";
  fmt::print("prepare: {}: {} labels; train {} documents, {} {}; eval {} documents (held out as for pretraining), {} {}\n",
             o.task, st.labels, st.train_documents, st.train_examples, unit, st.eval_documents, st.eval_examples, unit);
  if (task == data::DownstreamTask::pos)
    fmt::print("prepare: pos: eval {} words, {:.1f}% not in training; most-frequent-tag-per-word baseline {:.1f}% token accuracy\n",
               st.eval_tokens, 100 * st.oov_rate, 100 * st.most_frequent_tag_accuracy);
  if (st.validation_documents > 0)
    fmt::print("prepare: {}: validation {} of the training documents, {} {} (for choosing hyperparameters)\n", o.task,
               st.validation_documents, st.validation_examples, unit);
  fmt::print("prepare: {}: majority-class baseline {:.1f}% accuracy on eval\n", o.task, 100 * st.majority_accuracy);
  fmt::print("prepare: wrote {}\n", o.out);
}

void run_prepare(const PrepareCommandOptions& o) {
  if (!o.verify.empty()) return run_verify(o.verify);
  if (!o.task.empty()) return run_prepare_task(o);
  check(o.validation_fraction == 0, "--validation-fraction {}: only with --task pos|genre (pretraining data holds "
        "out --eval-fraction only)", o.validation_fraction);
  check(!o.corpus.empty() && !o.vocab.empty() && !o.out.empty(), "prepare needs --corpus, --vocab and --out");
  auto start = std::chrono::steady_clock::now();
  auto limit = limit_data_threads(o.threads);
  auto tok = data::BertTokenizer::load(o.vocab);
  auto docs = data::read_corpus(data::resolve_corpus(o.corpus), enum_from_string<data::CorpusFormat>(o.format, "--format"));
  fmt::print(stderr, "prepare: {} documents from {}\n", docs.size(), o.corpus);
  auto stats = data::prepare_pretraining_data(docs, tok, o.prepare, o.out, stderr_progress("prepare"));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto [name, s] : {std::pair{"train", &stats.train}, std::pair{"eval", &stats.eval}}) {
    double tokens = static_cast<double>(std::max<std::size_t>(1, s->tokens));
    double masked = static_cast<double>(std::max<std::uint64_t>(1, s->masking.masked));
    fmt::print("prepare: {}: {} documents, {} instances in {} shards, {} tokens, masked {:.2f}% "
               "([MASK] {:.1f}% / random {:.1f}% / kept {:.1f}%), random next {:.1f}%\n",
               name, s->documents, s->instances, s->shards, s->tokens, 100.0 * s->masking.masked / tokens,
               100.0 * s->masking.replaced_by_mask / masked, 100.0 * s->masking.replaced_by_random / masked,
               100.0 * s->masking.kept / masked,
               100.0 * s->random_next / static_cast<double>(std::max<std::size_t>(1, s->instances)));
  }
  fmt::print("prepare: wrote {} in {:.2f} s\n", o.out, seconds);
}
}  // namespace

void add_prepare_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("prepare", "Make BERT pretraining instances (NSP + masked LM) from a corpus");
  auto o = std::make_shared<PrepareCommandOptions>();
  auto& p = o->prepare;
  cmd->add_option("--corpus", o->corpus, "Corpus file or directory, or 'brown' (scripts/fetch_corpus.sh)");
  cmd->add_option("--vocab", o->vocab, "Directory with vocab.txt (and tokenizer_config.json)");
  cmd->add_option("--out", o->out, "Output directory (shards, meta.json, vocabulary)");
  cmd->add_option("--format", o->format, "Corpus format: auto, text or brown")->capture_default_str();
  cmd->add_option("--seq-len", p.max_seq_length, "Maximum sequence length")->capture_default_str();
  cmd->add_option("--max-predictions", p.max_predictions_per_seq, "Maximum masked tokens per sequence")->capture_default_str();
  cmd->add_option("--masked-lm-prob", p.masked_lm_prob, "Fraction of tokens to mask")->capture_default_str();
  cmd->add_option("--short-seq-prob", p.short_seq_prob, "Probability of a shorter target length")->capture_default_str();
  cmd->add_option("--dupe-factor", p.dupe_factor, "Passes over the corpus, each masked differently")->capture_default_str();
  cmd->add_flag("--whole-word-mask", p.whole_word_mask, "Mask all pieces of a word together");
  cmd->add_flag("--pack", p.pack,
                "No sentence pairs: fill every sequence with consecutive text, [SEP] between documents (for train --no-nsp)");
  cmd->add_option("--seed", p.seed, "Random seed (output is identical for any thread count)")->capture_default_str();
  cmd->add_option("--eval-fraction", p.eval_fraction, "Fraction of documents held out for evaluation")->capture_default_str();
  cmd->add_option("--instances-per-shard", p.instances_per_shard, "Instances per shard file")->capture_default_str();
  cmd->add_flag("--force", p.overwrite, "Replace an existing output directory");
  add_threads_option(*cmd, o->threads, "Worker threads (default: all cores)");
  cmd->add_option("--verify", o->verify, "Only check the shards of a prepared directory");
  cmd->add_option("--validation-fraction", o->validation_fraction,
                  "--task: fraction of the training documents written apart as validation.conll/.csv (0: none)")
      ->capture_default_str();
  cmd->add_option("--task", o->task, "Instead of pretraining data: pos (CoNLL) or genre (CSV) fine-tuning data from Brown")
      ->check(CLI::IsMember({"pos", "genre"}));
  cmd->callback([o] { run_prepare(*o); });
}

}  // namespace bertlab::app

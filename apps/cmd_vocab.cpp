// bertlab vocab: train a WordPiece vocabulary (vocab.txt + tokenizer_config.json) on a corpus,
// and report its [UNK] rate and pieces per word on held-out documents.
#include <fmt/core.h>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/data_progress.h"
#include "data/corpus.h"
#include "data/vocab_trainer.h"
#include "base/error.h"

namespace bertlab::app {

namespace {
struct VocabOptions {
  std::string corpus, out, format = "auto";
  std::size_t vocab_size = 0, min_frequency = 2, limit_alphabet = 1000;
  bool cased = false;
  double holdout = 0.05;
  std::uint64_t seed = 12345;
  int threads = 0;
};

void run_vocab(const VocabOptions& o) {
  auto limit = limit_data_threads(o.threads);
  auto docs = data::read_corpus(data::resolve_corpus(o.corpus), enum_from_string<data::CorpusFormat>(o.format, "--format"));
  // Hold out the same documents `bertlab prepare` holds out with the same seed and fraction.
  auto split = data::split_documents(docs.size(), o.holdout, o.seed);
  std::vector<data::Document> train, heldout;
  for (auto i : split.train) train.push_back(docs[i]);
  for (auto i : split.eval) heldout.push_back(docs[i]);
  fmt::print(stderr, "vocab: {} documents ({} for training, {} held out)\n", docs.size(), train.size(),
             heldout.size());
  data::VocabTrainerOptions t;
  t.vocab_size = o.vocab_size;
  t.min_frequency = o.min_frequency;
  t.limit_alphabet = o.limit_alphabet;
  t.config.do_lower_case = !o.cased;
  auto vocab = data::train_wordpiece_vocab(train, t, stderr_progress("vocab"));
  data::save_vocab_dir(o.out, vocab, t.config);
  fmt::print("vocab: wrote {} tokens to {}/vocab.txt\n", vocab.size(), o.out);
  if (!heldout.empty()) {
    data::BertTokenizer tok(vocab, t.config);
    auto r = data::evaluate_vocab(tok, heldout);
    fmt::print("vocab: held-out {} words ({} with punctuation split off): {:.4f} tokens/word "
               "({:.4f} per split word), [UNK] rate {:.4f}% ({} of {} tokens)\n",
               r.text_words, r.words, r.tokens_per_text_word(), r.tokens_per_word(), 100.0 * r.unk_rate(),
               r.unknown, r.tokens);
  }
}
}  // namespace

void add_vocab_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("vocab", "Train a WordPiece vocabulary on a corpus");
  auto o = std::make_shared<VocabOptions>();
  cmd->add_option("--corpus", o->corpus, "Corpus file or directory, or 'brown' (scripts/fetch_corpus.sh)")->required();
  cmd->add_option("--vocab-size", o->vocab_size, "Vocabulary size, special tokens included")->required();
  cmd->add_option("--out", o->out, "Output directory for vocab.txt and tokenizer_config.json")->required();
  cmd->add_option("--format", o->format, "Corpus format: auto, text or brown")->capture_default_str();
  cmd->add_option("--min-frequency", o->min_frequency, "Merge only pairs seen this often")->capture_default_str();
  cmd->add_option("--limit-alphabet", o->limit_alphabet, "Keep the most frequent characters only")->capture_default_str();
  cmd->add_flag("--cased", o->cased, "Keep case and accents (do_lower_case = false)");
  cmd->add_option("--holdout", o->holdout, "Fraction of documents held out for the report")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the held-out split")->capture_default_str();
  add_threads_option(*cmd, o->threads, "Worker threads (default: all cores)");
  cmd->callback([o] { run_vocab(*o); });
}

}  // namespace bertlab::app

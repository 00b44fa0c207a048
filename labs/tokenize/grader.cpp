// Lab 6's grader: the student's WordPiece against bertlab's tokenizer (data/tokenizer.h)
// on hand-made words that probe each rule, then on every word of held-out text with vocabularies
// that bertlab's trainer builds here; and, for the handout, tokens per word and the [UNK] rate
// against vocabulary size and alphabet size, measured with the student's function.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <vector>

#include "labs/common/grader.h"
#include "labs/tokenize/lab.h"
#include "report/chart.h"
#include "data/corpus.h"
#include "data/pretraining.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "data/vocab_trainer.h"

namespace fs = std::filesystem;
using namespace bertlab;
using namespace bertlab::lab;

namespace {

// The student's view of a vocabulary: its tokens as a set.
std::unordered_set<std::string> token_set(const data::Vocab& vocab) {
  return {vocab.tokens().begin(), vocab.tokens().end()};
}

std::string join(const std::vector<std::string>& pieces) {
  std::string s = "[";
  for (size_t i = 0; i < pieces.size() && i < 8; ++i) s += (i ? ", \"" : "\"") + pieces[i] + "\"";
  if (pieces.size() > 8) s += fmt::format(", ... ({} pieces)", pieces.size());
  return s + "]";
}

// bertlab's pieces of one word (its characters as BasicTokenizer gives them).
std::vector<std::string> bertlab_pieces(const data::BertTokenizer& tok, const data::SpannedChar* chars, size_t n) {
  std::vector<data::Piece> pieces;
  tok.wordpiece(chars, n, pieces);
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(tok.vocab().token(p.id));
  return out;
}

std::vector<data::SpannedChar> characters(const std::string& word) {
  std::vector<data::SpannedChar> chars;
  for (size_t pos = 0; pos < word.size();) {
    size_t len = 0;
    const char32_t cp = data::decode_utf8(word, pos, len);
    chars.push_back({cp, static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + len)});
    pos += len;
  }
  return chars;
}

std::string repeat(const std::string& s, size_t n) {
  std::string r;
  for (size_t i = 0; i < n; ++i) r += s;
  return r;
}

// A hand-made word, and what it probes, in words that name the case, not the rule.
struct HandMade {
  std::string word;
  const char* what;
  // One of the handout's questions (step 3): a failure does not show bertlab's pieces, which are
  // its answer.
  bool question = false;
};

// Each word probes one rule of lab.h; the vocabulary is made for them.
Outcome hand_made_words() {
  std::vector<std::string> tokens = data::TokenizerConfig{}.special_tokens();
  for (const char* t : {"un", "##aff", "##able", "a", "##a", "abc", "ab", "##d", "##cde", "x", "ø", "##ø", "straße",
                        "日", "caf", "é", "##é", "##s"})
    tokens.push_back(t);
  data::TokenizerConfig cased;
  cased.do_lower_case = false;
  const data::BertTokenizer tok(data::Vocab(tokens, "the hand-made vocabulary"), cased);
  const auto set = token_set(tok.vocab());
  const std::vector<HandMade> words = {
      {"unaffable", "a word of three pieces"},
      {"x", "a word that is one piece"},
      {"abcd", "a word two different first pieces could start"},
      {"abcde", "a question of the handout's step 3", true},
      {"unaffablex", "a word whose last character is in no piece"},
      {"zebra", "a word whose first character is in no piece"},
      {"", "the empty word"},
      {"øø", "a word of 2-byte characters"},
      {"straße", "a whole word with a 2-byte character"},
      {"日", "a 3-byte character"},
      {"café", "a word ending in a 2-byte character"},
      {"cafés", "a word with a 2-byte character inside"},
      {repeat("a", 100), "a word of 100 letters, next to a question of step 3", true},
      {repeat("a", 101), "a word of 101 letters, a question of step 3", true},
      {repeat("é", 60), "a word of 60 characters of 2 bytes each (120 bytes)"},
  };
  for (const auto& w : words) {
    const auto chars = characters(w.word);
    const auto want = bertlab_pieces(tok, chars.data(), chars.size());
    const std::string shown = fmt::format("word \"{}\" ({})",
                                          w.word.size() > 40 ? w.word.substr(0, 12) + "..." : w.word, w.what);
    working_on(shown);
    const auto got = tokenize::wordpiece(w.word, set);
    if (got == want) continue;
    const std::string head = fmt::format("{}: you give {}", shown, join(got));
    if (w.question)
      return failed(head + "; bertlab's pieces differ (they are the answer to the question: work them out by "
                           "lab.h's rules)");
    return failed(fmt::format("{}, bertlab gives {}", head, join(want)));
  }
  return passed(fmt::format("{} words match bertlab's tokenizer", words.size()));
}

struct Corpus {
  std::vector<data::Document> train, heldout;
};

Corpus load_corpus(const std::string& spec, double holdout) {
  const auto docs = data::read_corpus(data::resolve_corpus(spec));
  const auto split = data::split_documents(docs.size(), holdout, 12345);  // as `bertlab vocab` splits
  Corpus c;
  for (auto i : split.train) c.train.push_back(docs[i]);
  for (auto i : split.eval) c.heldout.push_back(docs[i]);
  return c;
}

data::BertTokenizer train_vocab(const Corpus& c, size_t size, size_t alphabet) {
  data::VocabTrainerOptions o;
  o.vocab_size = size;
  o.limit_alphabet = alphabet;
  return data::BertTokenizer(data::train_wordpiece_vocab(c.train, o), o.config);
}

struct Tally {
  size_t words = 0, tokens = 0, unknown = 0;
  std::string mismatch;  // the first word where the student differs from bertlab
};

// Every word of the held-out documents through the student's function and bertlab's.
// `vocabulary` names the vocabulary in a failure ("8000 pieces, alphabet limit 1000").
Tally tokenize_heldout(const data::BertTokenizer& tok, const Corpus& c, const std::string& vocabulary) {
  const data::BasicTokenizer basic(tok.config());
  const auto set = token_set(tok.vocab());
  Tally t;
  data::Words words;
  std::string word;
  for (const auto& d : c.heldout)
    for (const auto& s : d.sentences) {
      words.clear();
      basic.split(s, 0, words);
      for (size_t w = 0; w < words.size(); ++w) {
        const auto* chars = words.chars.data() + words.starts[w];
        const size_t n = words.starts[w + 1] - words.starts[w];
        word.clear();
        for (size_t k = 0; k < n; ++k) data::append_utf8(word, chars[k].cp);
        working_on(fmt::format("word \"{}\" of {} (vocabulary: {})", word, d.source, vocabulary));
        const auto got = tokenize::wordpiece(word, set);
        const auto want = bertlab_pieces(tok, chars, n);
        if (got != want && t.mismatch.empty())
          t.mismatch = fmt::format("word \"{}\" of {} (vocabulary: {}): you give {}, bertlab gives {}", word,
                                   d.source, vocabulary, join(got), join(want));
        ++t.words;
        t.tokens += got.size();
        for (const auto& p : got) t.unknown += p == tokenize::kUnk;
      }
    }
  return t;
}

Outcome heldout_words(const std::string& corpus, double holdout, size_t vocab_size) {
  const Corpus c = load_corpus(corpus, holdout);
  const auto tok = train_vocab(c, vocab_size, 1000);
  const Tally t = tokenize_heldout(tok, c, fmt::format("{} pieces, alphabet limit 1000", tok.vocab().size()));
  if (!t.mismatch.empty()) return failed(t.mismatch);
  return passed(fmt::format("all {} held-out words of {} documents match ({} tokens, {} [UNK])", t.words,
                            c.heldout.size(), t.tokens, t.unknown));
}

// Tokens per word and [UNK] rate with the student's function, for vocabularies of each size and
// two alphabet limits; the totals must equal bertlab's own report (data::evaluate_vocab).
Outcome sweep(const std::string& corpus, double holdout, const std::vector<size_t>& sizes,
              const std::vector<size_t>& alphabets, const PlotPage& plots) {
  const Corpus c = load_corpus(corpus, holdout);
  std::vector<ChartSeries> per_word, unk;
  std::string detail;
  for (size_t alphabet : alphabets) {
    ChartSeries a{fmt::format("alphabet limit {}", alphabet), {}, {}}, b = a;
    for (size_t size : sizes) {
      const auto tok = train_vocab(c, size, alphabet);
      const Tally t =
          tokenize_heldout(tok, c, fmt::format("{} pieces, alphabet limit {}", tok.vocab().size(), alphabet));
      if (!t.mismatch.empty()) return failed(t.mismatch);
      const auto ref = data::evaluate_vocab(tok, c.heldout);
      if (t.tokens != ref.tokens || t.unknown != ref.unknown)
        return failed(fmt::format("vocabulary of {}: {} tokens ({} [UNK]), bertlab counts {} ({} [UNK])", size,
                                  t.tokens, t.unknown, ref.tokens, ref.unknown));
      const double tpw = double(t.tokens) / double(t.words), rate = 100.0 * double(t.unknown) / double(t.tokens);
      a.x.push_back(double(tok.vocab().size()));
      a.y.push_back(tpw);
      b.x.push_back(double(tok.vocab().size()));
      b.y.push_back(rate);
      detail += fmt::format("{}vocab {} (alphabet {}): {:.3f} tokens/word, [UNK] {:.2f}%", detail.empty() ? "" : "; ",
                            tok.vocab().size(), alphabet, tpw, rate);
    }
    per_word.push_back(std::move(a));
    unk.push_back(std::move(b));
  }
  plots.add(fmt::format("<h2>Vocabulary size</h2>\n<p>Held-out words of {} ({} documents), split by your "
                        "wordpiece function; vocabularies trained by bertlab on the other documents.</p>\n",
                        html_escape(corpus), c.heldout.size()) +
            line_chart_html({"pieces per word (punctuation split off)", "vocabulary size (tokens)", "tokens per word",
                            per_word, Scale::log, Scale::linear}) +
            line_chart_html({"[UNK] rate", "vocabulary size (tokens)", "% of tokens", unk, Scale::log, Scale::linear}));
  return passed(detail);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 6 grader: your WordPiece (labs/tokenize/student.cpp)"};
  std::string corpus = "brown", out = "out/labs";
  bool quick = false;
  app.add_option("--corpus", corpus, "Corpus: 'brown' (scripts/fetch_corpus.sh) or a text file or directory");
  app.add_option("--out", out, "Where the plots page goes");
  app.add_flag("--quick", quick, "The test fixture corpus and small vocabularies (the test suite)");
  std::string results_json;
  add_results_json_option(app, results_json);
  CLI11_PARSE(app, argc, argv);
  if (quick) corpus = source_dir() + "/tests/data/corpus_small.txt";
  // The fixture has only a few documents: hold out more of them.
  const double holdout = quick ? 0.3 : 0.05;
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{60, 100, 200}
                                          : std::vector<size_t>{250, 1000, 4000, 16000};
  const std::vector<size_t> alphabets = quick ? std::vector<size_t>{20, 1000} : std::vector<size_t>{30, 1000};

  Grader g("tokenize: WordPiece, longest match first", results_json);
  const PlotPage plots(out, "tokenize");
  // Hints name what to look at; a later check's hint says whether the earlier ones passed, as
  // they did or did not.
  const bool hand_made_ok = g.check(
      "hand-made words",
      "the detail names the first word where your pieces differ, or where your code crashed, threw or ran out of "
      "time, and what is special about that word: follow your code through it by hand, character by character, "
      "beside the rules in labs/tokenize/lab.h",
      hand_made_words);
  const std::string heldout_name = fmt::format("every held-out word of {}", quick ? "the fixture corpus" : corpus);
  const bool heldout_ok = g.check(
      heldout_name,
      hand_made_ok ? "the hand-made words pass but this real word does not: what does it have that they lack (its "
                     "length, the length of its pieces, its characters)? Follow your code through it by hand"
                   : "the hand-made words fail too: they are smaller, fix those first",
      [&] { return heldout_words(corpus, holdout, quick ? 200 : 8000); }, 300);
  g.check("tokens per word and [UNK] rate against vocabulary size",
          heldout_ok ? "your pieces agree with bertlab's on one vocabulary but not on the one named: does your code "
                       "keep anything from one call to the next, or assume something about the vocabulary?"
                     : "the held-out check fails too: fix that one first (its vocabulary is named in its detail)",
          [&] { return sweep(corpus, holdout, sizes, alphabets, plots); }, 300);
  fmt::print("plots: {}\n", plots.write("Lab 6: WordPiece and vocabulary size").string());
  return g.finish();
}

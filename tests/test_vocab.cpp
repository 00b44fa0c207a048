// WordPiece vocabulary trainer: a merge sequence derived by hand, determinism, limits.
#include <catch2/catch.hpp>

#include <tbb/global_control.h>

#include "data/vocab_trainer.h"
#include "base/error.h"
#include "tests/data_test_util.h"

using namespace bertlab::data;
using bertlab::test::data_dir;

namespace {
std::vector<Document> docs_of(std::vector<std::string> sentences) {
  return {Document{"test", std::move(sentences)}};
}
}  // namespace

TEST_CASE("trainer merges the most frequent pair first, as derived by hand", "[vocab]") {
  // Words: low x3, lower x1, lowest x1. Ids: specials 0-4, alphabet e l o r s t w = 5..11,
  // continuations ##e ##o ##r ##s ##t ##w = 12..17. Pair counts: (l,##o) = 5 and
  // (##o,##w) = 5 tie; (l,##o) has the smaller ids -> "lo". Then (lo,##w) = 5 -> "low".
  // Then (low,##e) = 2 -> "lowe". Every remaining pair occurs once: with min_frequency 2 the
  // training stops; with min_frequency 1 the smallest-id tie (##s,##t) -> "##st" is next.
  VocabTrainerOptions o;
  o.vocab_size = 100;
  o.min_frequency = 2;
  auto docs = docs_of({"low low low", "Lower", "lowest"});
  auto v = train_wordpiece_vocab(docs, o);
  std::vector<std::string> expected = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "e", "l", "o", "r",
                                       "s",     "t",     "w",     "##e",   "##o",    "##r", "##s", "##t",
                                       "##w",   "lo",    "low",   "lowe"};
  CHECK(v.tokens() == expected);
  o.min_frequency = 1;
  o.vocab_size = 22;
  expected.push_back("##st");
  CHECK(train_wordpiece_vocab(docs, o).tokens() == expected);
}

TEST_CASE("trainer is deterministic, whatever the thread count", "[vocab]") {
  auto docs = read_corpus(data_dir() / "corpus_small.txt");
  VocabTrainerOptions o;
  o.vocab_size = 300;
  o.min_frequency = 1;
  Vocab one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = train_wordpiece_vocab(docs, o);
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = train_wordpiece_vocab(docs, o);
  }
  CHECK(one.tokens() == two.tokens());
  CHECK(one.tokens() == train_wordpiece_vocab(docs, o).tokens());
  CHECK(one.size() == 300);
  // Training text tokenises without [UNK] and mostly into whole words.
  BertTokenizer tok(one, o.config);
  auto r = evaluate_vocab(tok, docs);
  CHECK(r.unknown == 0);
  CHECK(r.tokens_per_word() < 1.5);
}

TEST_CASE("alphabet limit and unknown characters", "[vocab]") {
  VocabTrainerOptions o;
  o.vocab_size = 50;
  o.limit_alphabet = 3;  // a (x7), b (x2), c (x2) kept; z (x1) dropped
  auto docs = docs_of({"aaa ab ab ac ac", "z"});
  auto v = train_wordpiece_vocab(docs, o);
  CHECK(v.find("z") < 0);
  CHECK(v.find("a") == 5);
  CHECK(v.find("b") == 6);
  BertTokenizer tok(v, o.config);
  auto r = evaluate_vocab(tok, docs_of({"ab z zab"}));
  CHECK(r.words == 3);
  CHECK(r.unknown == 2);
  CHECK(tok.tokenize("ab z") == std::vector<std::string>{"ab", "[UNK]"});
}

TEST_CASE("trainer rejects impossible sizes", "[vocab]") {
  VocabTrainerOptions o;
  o.vocab_size = 5;
  CHECK_THROWS_WITH(train_wordpiece_vocab(docs_of({"abc"}), o), Catch::Contains("no room"));
  o.vocab_size = 8;
  CHECK_THROWS_WITH(train_wordpiece_vocab(docs_of({"abcdef"}), o), Catch::Contains("--limit-alphabet"));
  o.vocab_size = 100;
  CHECK_THROWS_WITH(train_wordpiece_vocab(docs_of({" ", "\t"}), o), Catch::Contains("no words"));
}

// Tokenizer conformance: expectations come from tests/reference/bert_tokenizer_reference.py,
// an independent Python reimplementation of Hugging Face's BertTokenizer, run once over
// tests/data/tokenizer_cases.txt to write tests/data/tokenizer_expected.json.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/file_util.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "data/vocab_trainer.h"
#include "base/error.h"

namespace fs = std::filesystem;
using namespace bertlab::data;
using bertlab::read_file;
using bertlab::write_file_atomic;

namespace {

const fs::path kData = fs::path(BERTLAB_SOURCE_DIR) / "tests" / "data";

TokenizerConfig config_named(const std::string& name) {
  TokenizerConfig c;
  if (name == "lower_keep_accents") c.strip_accents = false;
  if (name == "cased") c.do_lower_case = false;
  if (name == "cased_strip") {
    c.do_lower_case = false;
    c.strip_accents = true;
  }
  return c;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / fmt::format("bertlab-tok-{}", ::getpid());
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("tokenizer matches the Hugging Face reference on every case", "[tokenizer]") {
  auto expected = nlohmann::json::parse(read_file(kData / "tokenizer_expected.json"));
  Vocab vocab = Vocab::load(kData / "vocab_small" / "vocab.txt");
  int checked = 0;
  for (const auto& c : expected["cases"]) {
    std::string config = c["config"];
    std::string name = config.substr(0, config.find(','));
    BertTokenizer tok(vocab, config_named(name));
    std::string a = c["a"];
    INFO("config " << config << ", text a: " << a);
    CHECK(tok.tokenize(a) == c["tokens_a"].get<std::vector<std::string>>());
    EncodeOptions options;
    if (c.contains("max_length")) {
      options.truncation = true;
      options.pad_to_max_length = true;
      options.max_length = c["max_length"].get<std::size_t>();
    }
    std::optional<std::string> b;
    if (c.contains("b")) b = c["b"].get<std::string>();
    Encoding e = b ? tok.encode(a, std::string_view(*b), options) : tok.encode(a, std::nullopt, options);
    std::vector<std::string> tokens;
    for (auto id : e.ids) tokens.push_back(vocab.token(id));
    CHECK(tokens == c["tokens"].get<std::vector<std::string>>());
    CHECK(e.ids == c["ids"].get<std::vector<std::int32_t>>());
    CHECK(e.type_ids == c["type_ids"].get<std::vector<std::int32_t>>());
    CHECK(e.attention_mask == c["attention_mask"].get<std::vector<std::int32_t>>());
    ++checked;
  }
  CHECK(checked >= 40);
}

TEST_CASE("offsets point back into the original text", "[tokenizer]") {
  BertTokenizer tok(Vocab::load(kData / "vocab_small" / "vocab.txt"), TokenizerConfig{});
  // "Cafe" + U+0301 composes to one character whose span covers both source characters.
  std::string text = "  Hello, Cafe\xCC\x81 unaffable 日本 [MASK]!";
  std::vector<Piece> pieces;
  tok.tokenize(text, pieces);
  std::vector<std::string> surface;
  for (const auto& p : pieces) surface.push_back(text.substr(p.begin, p.end - p.begin));
  CHECK(surface == std::vector<std::string>{"Hello", ",", "Cafe\xCC\x81", "un", "aff", "able",
                                            "日", "本", "[MASK]", "!"});
}

TEST_CASE("encode of a pair marks special tokens and segments", "[tokenizer]") {
  BertTokenizer tok(Vocab::load(kData / "vocab_small" / "vocab.txt"), TokenizerConfig{});
  Encoding e = tok.encode("hello world", std::string_view("fox"), {});
  CHECK(e.special_tokens_mask == std::vector<std::int32_t>{1, 0, 0, 1, 0, 1});
  CHECK(e.offsets[1] == std::pair<std::uint32_t, std::uint32_t>{0, 5});
  CHECK(e.offsets[4] == std::pair<std::uint32_t, std::uint32_t>{0, 3});
}

TEST_CASE("tokenizer_config.json settings are honoured", "[tokenizer]") {
  TempDir dir;
  fs::copy_file(kData / "vocab_small" / "vocab.txt", dir.path / "vocab.txt");
  write_file_atomic(dir.path / "tokenizer_config.json",
                    R"({"do_lower_case": false, "strip_accents": null, "model_max_length": 7,
                        "unk_token": {"content": "[UNK]", "lstrip": false}})");
  auto tok = BertTokenizer::load(dir.path);
  CHECK_FALSE(tok.config().do_lower_case);
  CHECK(tok.tokenize("Hello") == std::vector<std::string>{"Hello"});
  EncodeOptions o;
  o.truncation = true;
  CHECK(tok.encode("the quick brown fox jumps over", std::nullopt, o).ids.size() == 7);
}

TEST_CASE("bad vocabularies are rejected with the file and line", "[tokenizer]") {
  TempDir dir;
  auto vocab = dir.path / "vocab.txt";
  auto expect_error = [&](const std::string& contents, const std::string& fragment) {
    write_file_atomic(vocab, contents);
    try {
      BertTokenizer::load(dir.path);
      FAIL("no error for vocabulary containing: " << contents);
    } catch (const bertlab::Error& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Catch::Contains(fragment));
      CHECK_THAT(e.what(), Catch::Contains("vocab.txt"));
    }
  };
  expect_error("", "empty");
  expect_error("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n", "[MASK]");
  expect_error("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n", "line 7: duplicate token 'hello'");
  expect_error("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nbad\xff\n", "line 6: invalid UTF-8");
  expect_error("[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n", "line 3: empty token");
  fs::remove(vocab);
  CHECK_THROWS_WITH(BertTokenizer::load(dir.path), Catch::Contains("no such file"));
  CHECK_THROWS_WITH(BertTokenizer::load(dir.path / "missing"), Catch::Contains("does not exist"));
}

TEST_CASE("invalid UTF-8 input is reported with its byte offset", "[tokenizer]") {
  BertTokenizer tok(Vocab::load(kData / "vocab_small" / "vocab.txt"), TokenizerConfig{});
  CHECK_THROWS_WITH(tok.tokenize(std::string("ab\xc3(")), Catch::Contains("invalid UTF-8 at byte 3"));
}

TEST_CASE("basic tokenizer matches the reference on seeded random Unicode text", "[tokenizer]") {
  // tests/data/tokenizer_fuzz_expected.json: random strings over accents, combining marks of
  // several classes, Hangul jamo, Indic signs, Greek sigma, dotted I, CJK, punctuation,
  // spaces, controls and format characters, with the reference's words for every setting.
  auto expected = nlohmann::json::parse(read_file(kData / "tokenizer_fuzz_expected.json"));
  int checked = 0;
  for (const auto& c : expected["cases"]) {
    std::string text = c["text"];
    for (const auto& [name, words] : c["words"].items()) {
      INFO("config " << name << ", text: " << nlohmann::json(text).dump());
      CHECK(BasicTokenizer(config_named(name)).split(text) == words.get<std::vector<std::string>>());
      ++checked;
    }
  }
  CHECK(checked == 800);
}

TEST_CASE("truncation shorter than the special tokens is an error", "[tokenizer]") {
  BertTokenizer tok(Vocab::load(kData / "vocab_small" / "vocab.txt"), TokenizerConfig{});
  EncodeOptions o;
  o.truncation = true;
  o.max_length = 2;
  CHECK_THROWS_WITH(tok.encode("a", std::string_view("b"), o), Catch::Contains("max_length 2 is shorter than the 3 special tokens"));
  CHECK(tok.encode("a b c", std::nullopt, o).ids == std::vector<std::int32_t>{tok.cls_id(), tok.sep_id()});
}

namespace {

// WordPiece as Hugging Face's Python BertTokenizer writes it (and as bertlab searched before its
// trie): from each start, try the rest of the word, then one character less, ..., looking up
// each candidate ("##" + candidate after the first piece) in the vocabulary; a word that cannot
// be covered, or is longer than 100 characters, is one [UNK].
std::vector<std::int32_t> wordpiece_by_prefix_search(const Vocab& vocab, const std::vector<std::string>& chars,
                                                     std::int32_t unk) {
  if (chars.size() > BertTokenizer::kMaxWordChars) return {unk};
  std::vector<std::int32_t> ids;
  std::size_t start = 0;
  while (start < chars.size()) {
    std::int32_t id = -1;
    std::size_t end = chars.size();
    for (; end > start; --end) {
      std::string candidate = start == 0 ? "" : "##";
      for (std::size_t k = start; k < end; ++k) candidate += chars[k];
      id = vocab.find(candidate);
      if (id >= 0) break;
    }
    if (id < 0) return {unk};
    ids.push_back(id);
    start = end;
  }
  return ids;
}

// Checks tok.wordpiece against the search above on every word BasicTokenizer makes of `text`;
// returns the number of words checked.
int check_wordpiece(const BertTokenizer& tok, const std::string& text) {
  Words words;
  BasicTokenizer(tok.config()).split(text, 0, words);
  int checked = 0;
  for (std::size_t w = 0; w < words.size(); ++w) {
    const SpannedChar* chars = words.chars.data() + words.starts[w];
    const std::size_t n = words.starts[w + 1] - words.starts[w];
    std::vector<std::string> utf8(n);
    std::string word;
    for (std::size_t k = 0; k < n; ++k) {
      append_utf8(utf8[k], chars[k].cp);
      word += utf8[k];
    }
    std::vector<Piece> pieces;
    tok.wordpiece(chars, n, pieces);
    std::vector<std::int32_t> ids;
    for (const auto& p : pieces) ids.push_back(p.id);
    INFO("word: " << word);
    CHECK(ids == wordpiece_by_prefix_search(tok.vocab(), utf8, tok.unk_id()));
    ++checked;
  }
  return checked;
}

}  // namespace

TEST_CASE("WordPiece's trie search splits words as the search over every prefix does", "[tokenizer]") {
  // The tokenizer looked up every prefix of the rest of a word in a hash map (16 lookups per
  // character with vocab_small, the largest cost of fuzz_tokenizer); it now walks a trie once.
  std::vector<std::string> texts;
  for (const fs::path& file : {kData / "corpus_small.txt", kData / "tokenizer_cases.txt",
                               kData / "brown_sample" / "ca01", kData / "brown_sample" / "cb02"}) {
    std::istringstream lines(read_file(file));
    for (std::string line; std::getline(lines, line);) texts.push_back(line);
  }
  // Random words of fragments that vocabularies hold in part: multi-byte characters, combining
  // marks, pieces of tokens, and words past the 100-character limit.
  const std::vector<std::string> fragments = {"a", "b", "ab", "un", "aff", "able", "the", "ing", "é", "e\xCC\x81",
                                              "ü", "中", "本", "ελ", "при", "x", "ly", "s", "##", "q"};
  std::mt19937 rng(14);
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int words = 1 + static_cast<int>(rng() % 6);
    for (int w = 0; w < words; ++w) {
      const int n = trial == 0 && w == 0 ? 120 : 1 + static_cast<int>(rng() % 12);
      for (int k = 0; k < n; ++k) text += fragments[rng() % fragments.size()];
      text += ' ';
    }
    texts.push_back(text);
  }

  // vocab_small (the Hugging Face conformance vocabulary), one trained on the Brown sample
  // (realistic merged pieces), and one with pieces that end inside a multi-byte character (a
  // Vocab built in memory is not checked for UTF-8): a search over characters never matches them.
  std::vector<BertTokenizer> tokenizers;
  tokenizers.emplace_back(Vocab::load(kData / "vocab_small" / "vocab.txt"), TokenizerConfig{});
  std::vector<Document> docs;
  for (const char* name : {"ca01", "cb02"}) {
    std::istringstream lines(read_file(kData / "brown_sample" / name));
    Document d{name, {}};
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) d.sentences.push_back(line);
    docs.push_back(std::move(d));
  }
  VocabTrainerOptions options;
  options.vocab_size = 300;
  options.min_frequency = 1;
  tokenizers.emplace_back(train_wordpiece_vocab(docs, options), TokenizerConfig{});
  tokenizers.emplace_back(Vocab({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "ab", "##b", "##ab", "u", "##n",
                                 "un", "unaff", "##aff", "##able", "\xC3", "a\xC3", "##\xC3", "##b\xC3", "\xC3\xA9",
                                 "##\xC3\xBC", "\xE4\xB8", "##e", "e", "##\xCC\x81", "##ly", "##s", "the", "##the"},
                                "vocabulary with cut characters"),
                           TokenizerConfig{});
  const auto& trained = tokenizers[1].vocab().tokens();
  CHECK(std::count_if(trained.begin(), trained.end(), [](const std::string& t) { return t.size() >= 5; }) > 30);
  for (const auto& tok : tokenizers) {
    int checked = 0;
    for (const auto& text : texts) checked += check_wordpiece(tok, text);
    CHECK(checked > 2000);
  }
}

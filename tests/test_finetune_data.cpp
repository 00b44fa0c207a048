// Fine-tuning data: CSV (RFC 4180) / TSV / JSON lines / CoNLL readers, their error messages,
// label sets, and Hugging Face's token-label alignment on hand-written cases.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "data/downstream.h"
#include "base/file_util.h"
#include "data/task_data.h"
#include "base/error.h"
#include "tests/data_test_util.h"

using namespace bertlab::data;
using bertlab::read_file;
using bertlab::test::data_dir;
using bertlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

fs::path write(const TempDir& d, const std::string& name, const std::string& text) {
  fs::path p = d.path / name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

BertTokenizer small_tokenizer() {
  return BertTokenizer(Vocab::load(data_dir() / "vocab_small" / "vocab.txt"), TokenizerConfig{});
}

std::vector<std::string> tokens_of(const BertTokenizer& tok, const EncodedExample& e) {
  std::vector<std::string> out;
  for (int32_t id : e.ids) out.push_back(tok.vocab().token(id));
  return out;
}

}  // namespace

TEST_CASE("CSV follows RFC 4180: quoted delimiters, doubled quotes, newlines in quotes", "[finetune][data]") {
  TempDir d("ft-csv");
  auto f = write(d, "train.csv",
                 "text,text_pair,label\r\n"
                 "\"a, b\",plain,pos\r\n"
                 "\"say \"\"hi\"\"\", \"x\" ,neg\n"  // spaces around an unquoted field stay
                 "\n"
                 "\"two\nlines\",y,pos\n");
  REQUIRE_THROWS_WITH(read_text_examples(f, true), Catch::Contains("train.csv:3: invalid CSV"));
  f = write(d, "train.csv",
            "text,text_pair,label\r\n"
            "\"a, b\",plain,pos\r\n"
            "\"say \"\"hi\"\"\", x ,neg\n"
            "\n"
            "\"two\nlines\",y,pos\n"
            "last,z,neg");
  auto ex = read_text_examples(f, true);
  REQUIRE(ex.size() == 4);
  CHECK(ex[0].text == "a, b");
  CHECK(ex[0].text_pair == "plain");
  CHECK(ex[0].has_pair);
  CHECK(ex[1].text == "say \"hi\"");
  CHECK(ex[1].text_pair == " x ");
  CHECK(ex[2].text == "two\nlines");
  CHECK(ex[2].source == f.string() + ":5");
  CHECK(ex[3].source == f.string() + ":7");
  CHECK(ex[3].label == "neg");
  auto labels = LabelSet::from_examples(ex);
  CHECK(labels.names() == std::vector<std::string>{"neg", "pos"});
}

TEST_CASE("TSV and JSON lines with GLUE column names", "[finetune][data]") {
  TempDir d("ft-tsv");
  auto ex = read_text_examples(write(d, "dev.tsv", "idx\tsentence1\tsentence2\tlabel\n0\tA \"q\"\tB\t1\n"), true);
  REQUIRE(ex.size() == 1);
  CHECK(ex[0].text == "A \"q\"");
  CHECK(ex[0].text_pair == "B");
  CHECK(ex[0].label == "1");
  ex = read_text_examples(write(d, "x.jsonl", "{\"sentence\": \"good\", \"label\": 1}\n\n{\"label\": 0, \"sentence\": \"bad\"}\n"), true);
  REQUIRE(ex.size() == 2);
  CHECK(ex[0].text == "good");
  CHECK_FALSE(ex[0].has_pair);
  CHECK(ex[1].label == "0");
  CHECK(ex[1].source == (d.path / "x.jsonl").string() + ":3");
}

TEST_CASE("bad fine-tuning files name the file, line and field", "[finetune][data][bad-input]") {
  TempDir d("ft-bad");
  CHECK_THROWS_WITH(read_text_examples(write(d, "a.csv", "text,text_pair\nx,y\n"), true),
                    Catch::Contains("a.csv:1: header: no 'label' column (columns: text, text_pair)"));
  CHECK_NOTHROW(read_text_examples(write(d, "a.csv", "text,text_pair\nx,y\n"), false));
  CHECK_THROWS_WITH(read_text_examples(write(d, "b.csv", "text,label\nx,1\nx,y,1\n"), true),
                    Catch::Contains("b.csv:3: too many fields: 3, the header has 2"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "b.tsv", "text\tlabel\nx\n"), true),
                    Catch::Contains("b.tsv:2: too few fields: 1, the header has 2 (text, label); field 'label' is missing"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "c.csv", ""), true), Catch::Contains("c.csv: the file is empty"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "c2.csv", "text,label\n"), true),
                    Catch::Contains("c2.csv: the file has no examples"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "d.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\"}\n"), true),
                    Catch::Contains("d.jsonl:2: field 'label' is missing"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "e.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": 1, \"x\": 2}\n"), true),
                    Catch::Contains("e.jsonl:2: too many fields"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "f.jsonl", "{\"text\": \"a\", \"label\": 1\n"), true),
                    Catch::Contains("f.jsonl:1: invalid JSON"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "g.csv", "text,label\n\"open,1\n"), true),
                    Catch::Contains("g.csv:2: invalid CSV: a quoted field is not closed"));
  CHECK_THROWS_WITH(read_text_examples(write(d, "h.txt", "x"), true), Catch::Contains("h.txt: unknown file type '.txt'"));
  CHECK_THROWS_WITH(read_conll(write(d, "i.conll", "The\tDT\ndog NN\n"), true),
                    Catch::Contains("i.conll:2: expected word<TAB>tag, found no tab in 'dog NN'"));
  CHECK_THROWS_WITH(read_conll(write(d, "j.conll", "The\tDT\tB-NP\n"), true), Catch::Contains("j.conll:1: too many fields"));
  CHECK_THROWS_WITH(read_conll(write(d, "k.conll", "\n\n"), true), Catch::Contains("k.conll: the file has no sentences"));
  auto labels = LabelSet::from_examples(read_text_examples(write(d, "t.csv", "text,label\na,x\nb,y\n"), true));
  CHECK_THROWS_WITH(labels.id("z", "dev.csv:4"),
                    Catch::Contains("dev.csv:4: label 'z' is not among the 2 labels of the training file"));
}

TEST_CASE("CoNLL sentences and tag sets", "[finetune][data]") {
  TempDir d("ft-conll");
  auto s = read_conll(write(d, "t.conll", "-DOCSTART-\tO\n\nThe\tDT\ndog\tNN\n\n\n.\t.\r\n"), true);
  REQUIRE(s.size() == 2);
  CHECK(s[0].words == std::vector<std::string>{"The", "dog"});
  CHECK(s[0].tags == std::vector<std::string>{"DT", "NN"});
  CHECK(s[0].source == (d.path / "t.conll").string() + ":3");
  CHECK(s[1].tags == std::vector<std::string>{"."});
  CHECK(LabelSet::from_sentences(s).names() == std::vector<std::string>{".", "DT", "NN"});
  auto untagged = read_conll(write(d, "p.conll", "The\ndog\n"), false);
  CHECK(untagged[0].tags.empty());
}

TEST_CASE("token labels follow Hugging Face's first-sub-word rule", "[finetune][data][alignment]") {
  auto tok = small_tokenizer();
  // Hand-aligned: "unaffable" -> un ##aff ##able, "U.S." -> u . s . (basic tokenizer splits
  // punctuation inside the word; all four pieces belong to the word).
  const std::vector<std::string> words{"Hello", "unaffable", "U.S.", "dog"};
  auto e = encode_words(tok, words, {10, 11, 12, 13}, 64);
  CHECK(tokens_of(tok, e) == std::vector<std::string>{"[CLS]", "hello", "un", "##aff", "##able", "u", ".", "s", ".", "dog", "[SEP]"});
  CHECK(e.labels == std::vector<int32_t>{-100, 10, 11, -100, -100, 12, -100, -100, -100, 13, -100});
  CHECK(e.word_of_token == std::vector<int32_t>{-1, 0, 1, 1, 1, 2, 2, 2, 2, 3, -1});
  CHECK(e.type_ids == std::vector<int32_t>(11, 0));
  CHECK_FALSE(e.truncated);
  // Truncated to 6 tokens: the words after the cut lose their labels.
  e = encode_words(tok, words, {10, 11, 12, 13}, 6);
  CHECK(tokens_of(tok, e) == std::vector<std::string>{"[CLS]", "hello", "un", "##aff", "##able", "[SEP]"});
  CHECK(e.labels == std::vector<int32_t>{-100, 10, 11, -100, -100, -100});
  CHECK(e.truncated);
  // Exactly fitting is not truncation.
  e = encode_words(tok, {"dog", "fox"}, {1, 2}, 4);
  CHECK(e.labels == std::vector<int32_t>{-100, 1, 2, -100});
  CHECK_FALSE(e.truncated);
}

TEST_CASE("sequence examples encode as a pair and truncate longest first", "[finetune][data]") {
  auto tok = small_tokenizer();
  TextExample ex{"the quick brown fox", "lazy dog", true, "x", "t:1"};
  auto e = encode_text(tok, ex, 3, 64);
  CHECK(tokens_of(tok, e) == std::vector<std::string>{"[CLS]", "the", "quick", "brown", "fox", "[SEP]", "lazy", "dog", "[SEP]"});
  CHECK(e.type_ids == std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 1, 1});
  CHECK(e.labels == std::vector<int32_t>{3});
  CHECK_FALSE(e.truncated);
  e = encode_text(tok, ex, 3, 7);
  CHECK(tokens_of(tok, e) == std::vector<std::string>{"[CLS]", "the", "quick", "[SEP]", "lazy", "dog", "[SEP]"});
  CHECK(e.truncated);
}


TEST_CASE("Brown base tags", "[finetune][data][brown]") {
  for (auto [tag, base] : std::vector<std::pair<const char*, const char*>>{
           {"nn-tl", "nn"}, {"vb+ppo", "vb"}, {"bez*", "bez"}, {"--", "--"}, {"''", "''"}, {"np$", "np$"},
           {"fw-at+nn", "fw"}, {"*", "*"}, {"dod*", "dod"}})
    CHECK(brown_base_tag(tag) == base);
  CHECK(brown_category("ca01") == "news");
  CHECK(brown_category("cr09") == "humor");
}

TEST_CASE("prepare --task pos: held-out documents and hand-computed baselines", "[finetune][data][brown]") {
  TempDir d("ft-brown");
  fs::create_directories(d.path / "brown");
  write(d, "brown/ca01", "\n\tThe/at dog/nn barks/vbz ./.\n\n\tThe/at dog/vb ./.\n");
  write(d, "brown/cb01", "\n\tThe/at-tl dog/nn ./.\n\n\tdogs/nns+bez bark/vb ./.\n");
  DownstreamOptions o;
  o.eval_fraction = 0.5;
  auto st = prepare_downstream(d.path / "brown", DownstreamTask::pos, nullptr, o, d.path / "pos");
  REQUIRE(st.eval_document_names.size() == 1);
  auto meta = nlohmann::json::parse(read_file(d.path / "pos/meta.json"));
  CHECK(meta.at("eval_documents") == nlohmann::json{st.eval_document_names[0]});
  // Ties go to the smaller tag: "dog" -> nn (nn 1, vb 1 in ca01); the overall tag is "." there.
  if (st.eval_document_names[0] == "cb01") {
    CHECK(st.eval_tokens == 6);
    CHECK(st.most_frequent_tag_accuracy == Approx(4.0 / 6));
    CHECK(st.oov_rate == Approx(2.0 / 6));
    CHECK(st.majority_accuracy == Approx(2.0 / 6));
  } else {
    CHECK(st.eval_tokens == 7);
    CHECK(st.most_frequent_tag_accuracy == Approx(5.0 / 7));
    CHECK(st.oov_rate == Approx(1.0 / 7));
    CHECK(st.majority_accuracy == Approx(2.0 / 7));
  }
  auto train = read_conll(d.path / "pos/train.conll", true), eval = read_conll(d.path / "pos/eval.conll", true);
  CHECK(train.size() == 2);
  CHECK(eval.size() == 2);
  CHECK_THROWS_WITH(prepare_downstream(d.path / "brown", DownstreamTask::pos, nullptr, o, d.path / "pos"),
                    Catch::Contains("already exists and is not empty"));
  // Genre: chunks of whole sentences within the token budget, labelled by category.
  auto tok = small_tokenizer();
  o.max_tokens = 12;
  st = prepare_downstream(d.path / "brown", DownstreamTask::genre, &tok, o, d.path / "genre");
  auto ex = read_text_examples(d.path / "genre/train.csv", true);
  auto ev = read_text_examples(d.path / "genre/eval.csv", true);
  CHECK(LabelSet::from_examples(ex).size() == 1);
  CHECK(ex[0].label == (st.eval_document_names[0] == "cb01" ? "news" : "editorial"));
  for (const auto& e : ex) CHECK(tok.encode_ids(e.text).size() + 2 <= 12);
  // ca01: 8 + 3 pieces do not fit one chunk of 12 with [CLS]/[SEP]; cb01: 3 + 7 do.
  CHECK(ex.size() + ev.size() == 3);
  CHECK(st.majority_accuracy == 0);   // the eval document's genre is not the training one
}

TEST_CASE("prepare --task --validation-fraction: validation documents cut from the training ones", "[finetune][data][brown]") {
  TempDir d("ft-brown-val");
  fs::create_directories(d.path / "brown");
  // Ten documents of one sentence each, a word naming the document.
  for (int i = 0; i < 10; ++i)
    write(d, fmt::format("brown/c{}0{}", "abcdefghjk"[i], i), fmt::format("\n\tdoc{}/nn ran/vbd ./.\n", i));
  DownstreamOptions o;
  o.eval_fraction = 0.2;
  auto plain = prepare_downstream(d.path / "brown", DownstreamTask::pos, nullptr, o, d.path / "plain");
  o.validation_fraction = 0.25;
  auto st = prepare_downstream(d.path / "brown", DownstreamTask::pos, nullptr, o, d.path / "val");
  // The held-out documents do not move; 2 of the 8 training ones become validation.
  CHECK(st.eval_document_names == plain.eval_document_names);
  CHECK(st.validation_documents == 2);
  CHECK(st.train_documents == 6);
  auto words = [&](const char* file) {
    std::set<std::string> w;
    for (const auto& s : read_conll(d.path / file, true)) w.insert(s.words[0]);
    return w;
  };
  const auto train = words("val/train.conll"), validation = words("val/validation.conll"),
             eval = words("val/eval.conll"), all_train = words("plain/train.conll");
  CHECK(train.size() == 6);
  CHECK(validation.size() == 2);
  std::set<std::string> both = train;
  both.insert(validation.begin(), validation.end());
  CHECK(both == all_train);  // train + validation = the training documents, nothing held out
  for (const auto& w : eval) CHECK(both.count(w) == 0);
  auto meta = nlohmann::json::parse(read_file(d.path / "val/meta.json"));
  CHECK(meta.at("validation_documents").size() == 2);
  CHECK(meta.at("validation_examples") == 2);
  CHECK_FALSE(fs::exists(d.path / "plain/validation.conll"));
  // Genre writes validation.csv the same way.
  auto tok = small_tokenizer();
  prepare_downstream(d.path / "brown", DownstreamTask::genre, &tok, o, d.path / "genre");
  CHECK(read_text_examples(d.path / "genre/validation.csv", true).size() == 2);
  o.validation_fraction = 1.0;
  CHECK_THROWS_WITH(prepare_downstream(d.path / "brown", DownstreamTask::pos, nullptr, o, d.path / "bad"),
                    Catch::Contains("--validation-fraction 1: expected a fraction in [0, 1)"));
}

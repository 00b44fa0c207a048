// Corpus readers: Google's plain-text format, directories, the Brown `word/TAG` format, and
// the errors for bad input.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "data/corpus.h"
#include "base/file_util.h"
#include "base/error.h"
#include "tests/data_test_util.h"

using namespace bertlab::data;
using bertlab::write_file_atomic;
using bertlab::test::data_dir;
using bertlab::test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("plain text: one sentence per line, blank lines between documents", "[data]") {
  auto docs = read_corpus(data_dir() / "corpus_small.txt");
  REQUIRE(docs.size() == 4);  // runs of blank (or whitespace-only) lines make no empty documents
  CHECK(docs[0].sentences.size() == 4);
  CHECK(docs[0].sentences[0] == "The quick brown fox jumps over the lazy dog.");
  CHECK(docs[1].source == (data_dir() / "corpus_small.txt").string() + ":7");
  CHECK(docs[2].sentences[0] == "Café owners in Paris open early.");
  CHECK(docs[3].sentences.size() == 4);
}

TEST_CASE("directories are read recursively in path order, hidden files skipped", "[data]") {
  auto docs = read_corpus(data_dir() / "corpus_dir");
  REQUIRE(docs.size() == 4);
  CHECK(docs[0].sentences == std::vector<std::string>{"First file only document."});
  CHECK(docs[1].sentences.size() == 2);
  CHECK(docs[2].sentences == std::vector<std::string>{"Second file, second document."});
  CHECK(docs[3].sentences == std::vector<std::string>{"A nested file is read too."});
}

TEST_CASE("Brown format: tags dropped, words detokenised, one document per file", "[data]") {
  auto docs = read_corpus(data_dir() / "brown_sample");  // detected: c<genre><nn> files
  REQUIRE(docs.size() == 2);
  CHECK(docs[0].sentences == std::vector<std::string>{
                                 "The committee said \"no changes\" were needed.",
                                 "Its members, however, disagreed (strongly); they didn't agree!",
                                 "Sales rose 5% in 1961."});
  CHECK(docs[1].sentences == std::vector<std::string>{"A second document begins here.", "Was it good?"});
  CHECK(read_corpus(data_dir() / "brown_sample" / "cb02").size() == 1);  // a single file, by content
  CHECK(detokenize_brown("``/`` Hi/uh ''/'' ,/, he/pps said/vbd") == "\"Hi\", he said");
  CHECK(looks_like_brown("The/at jury/nn ./."));
  CHECK_FALSE(looks_like_brown("The jury and/or the judge."));
}

TEST_CASE("corpus errors name the file and line", "[data]") {
  TempDir dir("corpus");
  auto bad = dir.path / "bad.txt";
  write_file_atomic(bad, "fine line\nsecond line\nbroken \xC3\x28 here\n");
  CHECK_THROWS_WITH(read_corpus(bad), Catch::Contains("bad.txt:3: invalid UTF-8 at column 8"));
  auto empty = dir.path / "empty.txt";
  write_file_atomic(empty, "\n   \n\n");
  CHECK_THROWS_WITH(read_corpus(empty), Catch::Contains("empty.txt: contains no text"));
  CHECK_THROWS_WITH(read_corpus(dir.path / "missing.txt"), Catch::Contains("missing.txt: corpus path does not exist"));
  fs::create_directories(dir.path / "nothing");
  CHECK_THROWS_WITH(read_corpus(dir.path / "nothing"), Catch::Contains("holds no corpus files"));
  CHECK_THROWS_WITH(bertlab::enum_from_string<CorpusFormat>("xml", "--format"), Catch::Contains("--format: unknown value 'xml' (expected one of: auto, text, brown)"));
}

TEST_CASE("corpus name brown points to the fetch script when the corpus is missing", "[data]") {
  TempDir dir("cache");
  const char* old = std::getenv("BERTLAB_DATA");
  std::string saved = old ? old : "";
  ::setenv("BERTLAB_DATA", dir.path.c_str(), 1);
  CHECK_THROWS_WITH(resolve_corpus("brown"), Catch::Contains("scripts/fetch_corpus.sh"));
  fs::create_directories(dir.path / "brown");
  write_file_atomic(dir.path / "brown" / ".integrity", "sha512-x\n");
  CHECK(resolve_corpus("brown") == dir.path / "brown");
  if (old)
    ::setenv("BERTLAB_DATA", saved.c_str(), 1);
  else
    ::unsetenv("BERTLAB_DATA");
}

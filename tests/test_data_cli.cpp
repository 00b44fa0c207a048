// The data subcommands end to end (bertlab tokenize / vocab / prepare): output, exit codes,
// error messages, and no partial output on bad input.
#include <catch2/catch.hpp>

#include "base/file_util.h"
#include "tests/data_test_util.h"

using bertlab::read_file;
using bertlab::write_file_atomic;
using bertlab::test::data_dir;
using bertlab::test::run_shell;
using bertlab::test::TempDir;
namespace fs = std::filesystem;

namespace {
const std::string kBin = BERTLAB_RUN BERTLAB_BINARY;

std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST_CASE("bertlab tokenize writes one JSON array per line", "[data]") {
  TempDir dir("cli-tok");
  write_file_atomic(dir.path / "in.txt", "Hello, world!\nUnaffable [MASK]\thello\n");
  const std::string vocab = (data_dir() / "vocab_small").string();
  auto run = [&](const std::string& flags) {
    int rc = run_shell(fmt::format("{} tokenize --vocab {} {} < {} > {} 2> {}", kBin, vocab, flags,
                                   (dir.path / "in.txt").string(), (dir.path / "out.txt").string(),
                                   (dir.path / "err.txt").string()));
    REQUIRE(rc == 0);
    return read_file(dir.path / "out.txt");
  };
  CHECK(run("") == "[\"hello\",\",\",\"world\",\"!\"]\n[\"un\",\"##aff\",\"##able\",\"[MASK]\",\"hello\"]\n");
  CHECK(run("--special") == "[\"[CLS]\",\"hello\",\",\",\"world\",\"!\",\"[SEP]\"]\n"
                            "[\"[CLS]\",\"un\",\"##aff\",\"##able\",\"[MASK]\",\"hello\",\"[SEP]\"]\n");
  write_file_atomic(dir.path / "in.txt", "hello\tworld\n");
  CHECK(run("--pair --special") == "[\"[CLS]\",\"hello\",\"[SEP]\",\"world\",\"[SEP]\"]\n");
  CHECK(run("--pair --special --ids") == "[2,123,3,124,3]\n");
}

TEST_CASE("bertlab tokenize rejects bad input with a clear error", "[data]") {
  TempDir dir("cli-tok-bad");
  const std::string vocab = (data_dir() / "vocab_small").string();
  auto err = (dir.path / "err.txt").string();
  write_file_atomic(dir.path / "in.txt", "fine\nbad \xff byte\n");
  CHECK(run_shell(fmt::format("{} tokenize --vocab {} < {} > /dev/null 2> {}", kBin, vocab,
                              (dir.path / "in.txt").string(), err)) == 1);
  CHECK_THAT(read_file(err), Catch::Contains("bertlab: error: standard input:2: invalid UTF-8 at column 5"));
  write_file_atomic(dir.path / "in.txt", "no tab here\n");
  CHECK(run_shell(fmt::format("{} tokenize --vocab {} --pair < {} > /dev/null 2> {}", kBin, vocab,
                              (dir.path / "in.txt").string(), err)) == 1);
  CHECK_THAT(read_file(err), Catch::Contains("standard input:1: expected two segments separated by a tab"));
  fs::create_directories(dir.path / "v");
  write_file_atomic(dir.path / "v" / "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n");
  CHECK(run_shell(fmt::format("echo hi | {} tokenize --vocab {} > /dev/null 2> {}", kBin, (dir.path / "v").string(), err)) == 1);
  CHECK_THAT(read_file(err), Catch::Contains("vocab.txt: the vocabulary lacks the special token '[MASK]'"));
}

TEST_CASE("bertlab vocab and prepare: deterministic output, errors leave nothing behind", "[data]") {
  TempDir dir("cli-prep");
  const std::string corpus = (data_dir() / "corpus_small.txt").string();
  auto err = (dir.path / "err.txt").string();
  auto vocab = [&](const std::string& out) {
    return run_shell(fmt::format("{} vocab --corpus {} --vocab-size 200 --min-frequency 1 --holdout 0 --out {} > /dev/null 2> {}",
                                 kBin, corpus, (dir.path / out).string(), err));
  };
  REQUIRE(vocab("v1") == 0);
  REQUIRE(vocab("v2") == 0);
  CHECK(read_file(dir.path / "v1" / "vocab.txt") == read_file(dir.path / "v2" / "vocab.txt"));
  CHECK(fs::exists(dir.path / "v1" / "tokenizer_config.json"));

  auto prepare = [&](const std::string& corpus_path, const std::string& out, const std::string& extra = "") {
    return run_shell(fmt::format("{} prepare --corpus {} --vocab {} --seq-len 32 --eval-fraction 0 --out {} {} > /dev/null 2> {}",
                                 kBin, corpus_path, (dir.path / "v1").string(), (dir.path / out).string(), extra, err));
  };
  REQUIRE(prepare(corpus, "p1", "--threads 1") == 0);
  REQUIRE(prepare(corpus, "p2", "--threads 2") == 0);
  CHECK(read_file(dir.path / "p1" / "train-00000.shard") == read_file(dir.path / "p2" / "train-00000.shard"));
  CHECK(run_shell(fmt::format("{} prepare --verify {} > /dev/null 2> {}", kBin, (dir.path / "p1").string(), err)) == 0);

  const std::size_t before = entries(dir.path);
  // A corpus of one document cannot make next-sentence pairs.
  write_file_atomic(dir.path / "one.txt", "Only one document here.\nWith two sentences.\n");
  CHECK(prepare((dir.path / "one.txt").string(), "small") == 1);
  CHECK_THAT(read_file(err), Catch::Contains("corpus too small"));
  // Unreadable paths, invalid UTF-8, empty documents.
  CHECK(prepare((dir.path / "missing.txt").string(), "missing") == 1);
  CHECK_THAT(read_file(err), Catch::Contains("missing.txt: corpus path does not exist"));
  write_file_atomic(dir.path / "bad.txt", "Good line.\n\nBad \xc3 line.\n");
  CHECK(prepare((dir.path / "bad.txt").string(), "bad") == 1);
  CHECK_THAT(read_file(err), Catch::Contains("bad.txt:3: invalid UTF-8"));
  write_file_atomic(dir.path / "empty.txt", "\n\n");
  CHECK(prepare((dir.path / "empty.txt").string(), "empty") == 1);
  CHECK_THAT(read_file(err), Catch::Contains("empty.txt: contains no text"));
  // An existing output is not overwritten without --force.
  CHECK(prepare(corpus, "p1") == 1);
  CHECK_THAT(read_file(err), Catch::Contains("--force"));
  CHECK(entries(dir.path) == before + 3);  // only the three input files written above
  // A truncated shard is reported by --verify with the file and field.
  auto shard = dir.path / "p1" / "train-00000.shard";
  std::string bytes = read_file(shard);
  write_file_atomic(shard, bytes.substr(0, bytes.size() / 2));
  CHECK(run_shell(fmt::format("{} prepare --verify {} > /dev/null 2> {}", kBin, (dir.path / "p1").string(), err)) == 1);
  CHECK_THAT(read_file(err), Catch::Contains("train-00000.shard: truncated or padded: field payload_bytes"));
}

// `prepare`: instance statistics on a synthetic corpus, Google's invariants, identical output
// for 1 and 2 threads, shard round trip, the dataset reader, and rejection of bad shards.
#include <catch2/catch.hpp>

#include <tbb/global_control.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file_util.h"
#include "data/pretraining.h"
#include "data/rng.h"
#include "data/shard.h"
#include "base/error.h"
#include "tests/data_test_util.h"

using namespace bertlab::data;
using bertlab::read_file;
using bertlab::write_file_atomic;
using bertlab::test::data_dir;
using bertlab::test::TempDir;
namespace fs = std::filesystem;

namespace {

BertTokenizer small_tokenizer() {
  return BertTokenizer(Vocab::load(data_dir() / "vocab_small" / "vocab.txt"), TokenizerConfig{});
}

// Documents of short sentences over the words of tests/data/vocab_small, some of which split
// into several pieces ("unaffable" -> un ##aff ##able) for whole-word masking.
std::vector<Document> synthetic_corpus(std::size_t documents, std::uint64_t seed) {
  const std::vector<std::string> words = {"the",  "quick",  "brown", "fox",    "jumps",     "over",
                                          "lazy", "dog",    "hello", "world",  "unaffable", "playing",
                                          "runners", "tokenization", "cafe", "naive", "cooperation", "resume"};
  Rng rng(seed);
  std::vector<Document> docs(documents);
  for (std::size_t d = 0; d < documents; ++d) {
    docs[d].source = "synthetic:" + std::to_string(d);
    auto sentences = rng.randint(3, 40);
    for (std::int64_t s = 0; s < sentences; ++s) {
      std::string text;
      auto n = rng.randint(3, 12);
      for (std::int64_t w = 0; w < n; ++w) text += words[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(words.size()) - 1))] + " ";
      docs[d].sentences.push_back(text + ".");
    }
  }
  return docs;
}

std::vector<Instance> read_all(const fs::path& dir, const std::string& split) {
  auto ds = PretrainingDataset::open(dir, split, {});
  std::vector<Instance> out;
  for (std::size_t i = 0; i < ds.size(); ++i) out.push_back(ds.instance(i));
  return out;
}

bool same(const Instance& a, const Instance& b) {
  return a.tokens == b.tokens && a.len_a == b.len_a && a.is_random_next == b.is_random_next &&
         a.masked_positions == b.masked_positions && a.masked_labels == b.masked_labels;
}

std::string bytes_of(const fs::path& f) { return read_file(f); }

}  // namespace

TEST_CASE("prepare: masking and next-sentence statistics match BERT's", "[prepare]") {
  auto tok = small_tokenizer();
  TempDir dir("prep-stats");
  PrepareOptions o;
  o.max_seq_length = 64;
  o.dupe_factor = 4;
  auto stats = prepare_pretraining_data(synthetic_corpus(200, 7), tok, o, dir.path / "out");
  const auto& s = stats.train;
  REQUIRE(s.instances > 3000);
  double masked = static_cast<double>(s.masking.masked);
  INFO("instances " << s.instances << ", masked " << masked << " of " << s.tokens);
  CHECK(std::abs(masked / static_cast<double>(s.tokens) - 0.15) < 0.01);
  CHECK(std::abs(s.masking.replaced_by_mask / masked - 0.8) < 0.02);
  CHECK(std::abs(s.masking.replaced_by_random / masked - 0.1) < 0.02);
  CHECK(std::abs(s.masking.kept / masked - 0.1) < 0.02);
  CHECK(std::abs(static_cast<double>(s.random_next) / static_cast<double>(s.instances) - 0.5) < 0.03);
  // 5% of 200 documents held out.
  CHECK(stats.eval.documents == 10);
  CHECK(s.documents == 190);

  // Every instance: [CLS] A [SEP] B [SEP], within the length, masks as Google counts them.
  auto instances = read_all(dir.path / "out", "train");
  REQUIRE(instances.size() == s.instances);
  std::size_t short_ones = 0;
  for (const auto& inst : instances) {
    const auto n = inst.tokens.size();
    REQUIRE(n <= 64);
    REQUIRE(inst.len_a >= 1);
    REQUIRE(n >= inst.len_a + 4u);
    std::vector<std::int32_t> original = inst.tokens;
    for (std::size_t k = 0; k < inst.masked_positions.size(); ++k) original[inst.masked_positions[k]] = inst.masked_labels[k];
    REQUIRE(original[0] == tok.cls_id());
    REQUIRE(original[inst.len_a + 1u] == tok.sep_id());
    REQUIRE(original[n - 1] == tok.sep_id());
    auto expected = std::min<std::size_t>(20, std::max<long long>(1, std::llround(n * 0.15)));
    REQUIRE(inst.masked_positions.size() == expected);
    REQUIRE(std::is_sorted(inst.masked_positions.begin(), inst.masked_positions.end()));
    for (auto p : inst.masked_positions) {
      REQUIRE(original[p] != tok.cls_id());
      REQUIRE(original[p] != tok.sep_id());
    }
    short_ones += n < 40;
  }
  CHECK(short_ones > 0);  // short_seq_prob makes some shorter sequences
}

TEST_CASE("prepare: whole-word masking masks every piece of a word", "[prepare]") {
  auto tok = small_tokenizer();
  TempDir dir("prep-wwm");
  PrepareOptions o;
  o.max_seq_length = 64;
  o.whole_word_mask = true;
  prepare_pretraining_data(synthetic_corpus(60, 3), tok, o, dir.path / "out");
  std::size_t continuation_masked = 0;
  for (const auto& inst : read_all(dir.path / "out", "train")) {
    std::vector<std::int32_t> original = inst.tokens;
    for (std::size_t k = 0; k < inst.masked_positions.size(); ++k) original[inst.masked_positions[k]] = inst.masked_labels[k];
    std::set<std::size_t> masked(inst.masked_positions.begin(), inst.masked_positions.end());
    for (std::size_t i = 1; i < original.size(); ++i) {
      bool continuation = tok.vocab().token(original[i]).starts_with("##");
      if (!continuation || original[i - 1] == tok.sep_id() || original[i - 1] == tok.cls_id()) continue;
      // A piece and the piece before it (same word) are masked together or not at all.
      REQUIRE(masked.count(i) == masked.count(i - 1));
      continuation_masked += masked.count(i);
    }
  }
  CHECK(continuation_masked > 0);
}

TEST_CASE("prepare: identical shards with 1 and 2 threads", "[prepare]") {
  auto tok = small_tokenizer();
  auto corpus = synthetic_corpus(80, 11);
  TempDir dir("prep-threads");
  PrepareOptions o;
  o.max_seq_length = 48;
  o.dupe_factor = 2;
  o.instances_per_shard = 200;  // several shards
  for (int threads : {1, 2}) {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    prepare_pretraining_data(corpus, tok, o, dir.path / fmt::format("t{}", threads));
  }
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path / "t1")) {
    INFO(e.path().filename());
    CHECK(bytes_of(e.path()) == bytes_of(dir.path / "t2" / e.path().filename()));
    ++files;
  }
  CHECK(files >= 6);  // train shards, eval shard, meta.json, vocab.txt, tokenizer_config.json
  o.seed = 99;  // another seed gives other instances
  prepare_pretraining_data(corpus, tok, o, dir.path / "seed99");
  CHECK(bytes_of(dir.path / "t1" / "train-00000.shard") != bytes_of(dir.path / "seed99" / "train-00000.shard"));
}

TEST_CASE("shards round-trip and the dataset shuffles epochs and re-masks", "[prepare]") {
  TempDir dir("shard");
  std::vector<Instance> in(5);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i].tokens = {2, 10 + static_cast<int>(i), 3, 20, 21, 3};
    in[i].len_a = 1;
    in[i].is_random_next = i % 2;
    in[i].masked_positions = {1};
    in[i].masked_labels = {99};
  }
  ShardInfo info{8, 2, 210, false, 0, 0};
  write_shard(dir.path / "x.shard", info, in.data(), in.size());
  auto shard = Shard::open(dir.path / "x.shard");
  REQUIRE(shard.size() == 5);
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(same(shard.get(i), in[i]));
  CHECK_THROWS_WITH(shard.get(5), Catch::Contains("out of range"));

  // The dataset over a prepared directory.
  auto tok = small_tokenizer();
  PrepareOptions o;
  o.max_seq_length = 32;
  prepare_pretraining_data(synthetic_corpus(40, 5), tok, o, dir.path / "out");
  auto fixed = PretrainingDataset::open(dir.path / "out", "train", {false, 1});
  auto dynamic = PretrainingDataset::open(dir.path / "out", "train", {true, 1});
  REQUIRE(fixed.size() > 50);
  auto order0 = fixed.epoch_order(0), order1 = fixed.epoch_order(1);
  CHECK(order0 != order1);
  CHECK(order0 == fixed.epoch_order(0));
  std::sort(order1.begin(), order1.end());
  for (std::size_t i = 0; i < order1.size(); ++i) REQUIRE(order1[i] == i);
  // Dynamic masking: same original tokens, other masks per epoch, same mask for the same epoch.
  auto restore = [](Instance x) {
    for (std::size_t k = 0; k < x.masked_positions.size(); ++k) x.tokens[x.masked_positions[k]] = x.masked_labels[k];
    return x.tokens;
  };
  std::size_t differing = 0;
  for (std::size_t i = 0; i < 20; ++i) {
    auto s = fixed.instance(i), d0 = dynamic.instance(i, 0), d1 = dynamic.instance(i, 1);
    REQUIRE(restore(s) == restore(d0));
    REQUIRE(restore(d0) == restore(d1));
    REQUIRE(same(d0, dynamic.instance(i, 0)));
    REQUIRE(same(s, fixed.instance(i, 7)));  // static masks do not change with the epoch
    differing += d0.masked_positions != d1.masked_positions;
  }
  CHECK(differing > 10);
  // Batches in Google's layout.
  Batch batch;
  std::vector<std::size_t> idx = {0, 3};
  fixed.fill_batch(idx, 0, batch);
  CHECK(batch.input_ids.size() == 2 * 32);
  CHECK(batch.masked_lm_positions.size() == 2 * 20);
  auto first = fixed.instance(0);
  CHECK(batch.input_ids[0] == tok.cls_id());
  CHECK(batch.token_type_ids[first.len_a + 1u] == 0);
  CHECK(batch.token_type_ids[first.len_a + 2u] == 1);
  CHECK(batch.attention_mask[first.tokens.size() - 1] == 1);
  if (first.tokens.size() < 32) {
    CHECK(batch.attention_mask[first.tokens.size()] == 0);
    CHECK(batch.input_ids[first.tokens.size()] == tok.pad_id());
  }
  CHECK(batch.masked_lm_weights[first.masked_positions.size() - 1] == 1.f);
  CHECK(batch.next_sentence_labels[0] == (first.is_random_next ? 1 : 0));
  CHECK(PretrainingDataset::open(dir.path / "out", "eval", {}).size() > 0);
}

TEST_CASE("corrupted, truncated and foreign shards are rejected", "[prepare]") {
  TempDir dir("bad-shard");
  std::vector<Instance> in(3);
  for (auto& x : in) {
    x.tokens = {2, 7, 3, 8, 3};
    x.len_a = 1;
    x.masked_positions = {1};
    x.masked_labels = {7};
  }
  ShardInfo info{16, 4, 210, false, 0, 0};
  auto good = dir.path / "good.shard";
  write_shard(good, info, in.data(), in.size());
  const std::string bytes = read_file(good);
  auto variant = [&](const std::string& name, std::string b) {
    write_file_atomic(dir.path / name, b);
    return dir.path / name;
  };
  std::string flipped = bytes;
  flipped[bytes.size() - 3] ^= 0x40;
  CHECK_THROWS_WITH(Shard::open(variant("flip.shard", flipped)), Catch::Contains("flip.shard: checksum mismatch"));
  CHECK_THROWS_WITH(Shard::open(variant("cut.shard", bytes.substr(0, bytes.size() - 10))),
                    Catch::Contains("truncated"));
  CHECK_THROWS_WITH(Shard::open(variant("short.shard", bytes.substr(0, 20))), Catch::Contains("shorter than the 64-byte header"));
  CHECK_THROWS_WITH(Shard::open(variant("foreign.shard", "PK\x03\x04" + bytes.substr(4))), Catch::Contains("bad magic"));
  std::string v2 = bytes;
  v2[8] = 2;
  CHECK_THROWS_WITH(Shard::open(variant("v2.shard", v2)), Catch::Contains("version 2 is not supported"));
  CHECK_THROWS_WITH(Shard::open(dir.path / "none.shard"), Catch::Contains("none.shard: no such file"));
}

TEST_CASE("prepare rejects a corpus too small and leaves no partial output", "[prepare]") {
  auto tok = small_tokenizer();
  TempDir dir("prep-small");
  PrepareOptions o;
  std::vector<Document> two = {{"a", {"hello world .", "the dog ."}}, {"b", {"the fox .", "lazy dog ."}}};
  CHECK_THROWS_WITH(prepare_pretraining_data(two, tok, o, dir.path / "out"), Catch::Contains("corpus too small"));
  CHECK(fs::is_empty(dir.path));  // neither the output nor a temporary directory remains
  o.eval_fraction = 0;
  prepare_pretraining_data(two, tok, o, dir.path / "out");
  CHECK_THROWS_WITH(prepare_pretraining_data(two, tok, o, dir.path / "out"), Catch::Contains("--force"));
  o.overwrite = true;
  prepare_pretraining_data(two, tok, o, dir.path / "out");
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("the random streams are pinned: prepared data must not change between builds", "[prepare]") {
  // Values of this implementation (xoshiro256** seeded through SplitMix64) when the test was
  // written; a change here changes every prepared dataset for a given seed.
  Rng r(12345, {1, 2, 3});
  CHECK(r.next() == 0x4f5aef45ad26ec0bull);
  CHECK(r.next() == 0x8e3dbbf55724669aull);
  CHECK(r.next() == 0x4a53e077674c2745ull);
  Rng q(7);
  CHECK(q.randint(0, 9) == 7);
  CHECK(q.randint(-5, 5) == -2);
  CHECK(Rng(1, {2}).next() != Rng(1, {3}).next());
  Rng u(3);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 40000; ++i) {
    double x = u.uniform();
    REQUIRE((x >= 0 && x < 1));
    ++counts[static_cast<std::size_t>(u.randint(0, 3))];
  }
  for (int c : counts) CHECK(std::abs(c - 10000) < 400);
}

TEST_CASE("prepare --pack: full sequences without padding, documents in order, [SEP] between them", "[prepare][pack]") {
  auto tok = small_tokenizer();
  const auto corpus = synthetic_corpus(30, 11);
  const auto docs = tokenize_documents(tok, corpus);
  PrepareOptions o;
  o.max_seq_length = 48;
  o.pack = true;
  const auto kinds = token_kinds(tok);
  const auto spec = masking_spec(tok, o, kinds);
  Rng rng(5);
  SplitStats stats;
  const auto instances = packed_instances(docs, tok, o, spec, rng, stats);
  // The independent expectation: every document's ids followed by [SEP], in order, cut after
  // [CLS] into pieces of 47; the incomplete tail is dropped.
  std::vector<std::int32_t> stream;
  for (const auto& d : docs) {
    stream.insert(stream.end(), d.ids.begin(), d.ids.end());
    stream.push_back(tok.sep_id());
  }
  REQUIRE(instances.size() == stream.size() / 47);
  REQUIRE(instances.size() > 20);
  std::vector<std::int32_t> unpacked;
  for (const auto& inst : instances) {
    REQUIRE(inst.tokens.size() == 48);  // no padding anywhere
    REQUIRE(inst.len_a == 46);          // one segment: every token type 0
    REQUIRE_FALSE(inst.is_random_next);
    std::vector<std::int32_t> original = inst.tokens;
    for (std::size_t k = 0; k < inst.masked_positions.size(); ++k) original[inst.masked_positions[k]] = inst.masked_labels[k];
    REQUIRE(original[0] == tok.cls_id());
    for (auto p : inst.masked_positions) REQUIRE(original[p] != tok.sep_id());
    REQUIRE(inst.masked_positions.size() == 7);  // round(0.15 * 48)
    unpacked.insert(unpacked.end(), original.begin() + 1, original.end());
  }
  REQUIRE(std::equal(unpacked.begin(), unpacked.end(), stream.begin()));
  CHECK(stats.tokens == 48 * instances.size());

  // Through the whole pipeline: meta.json says packed, the batches have no padding and one
  // token type, and the reader accepts the single-segment records.
  TempDir dir("prep-pack");
  auto st = prepare_pretraining_data(corpus, tok, o, dir.path / "out");
  CHECK(st.train.random_next == 0);
  auto ds = PretrainingDataset::open(dir.path / "out", "train", {});
  REQUIRE(ds.packed());
  REQUIRE(ds.size() == st.train.instances);
  std::vector<std::size_t> idx{0, 1, 2, 3};
  Batch b;
  ds.fill_batch(idx, 0, b);
  for (std::size_t i = 0; i < b.attention_mask.size(); ++i) {
    REQUIRE(b.attention_mask[i] == 1);
    REQUIRE(b.token_type_ids[i] == 0);
  }
  for (auto l : b.next_sentence_labels) REQUIRE(l == 0);
  o.pack = false;
  prepare_pretraining_data(corpus, tok, o, dir.path / "pairs");
  CHECK_FALSE(PretrainingDataset::open(dir.path / "pairs", "train", {}).packed());
}

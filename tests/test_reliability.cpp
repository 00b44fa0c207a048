// Reliability (issue 14): inputs found by mutating valid files, corrupted checkpoints and
// interrupted runs. Every case ends in a bertlab::Error or exit 1 with a message naming the
// file, field or flag; nothing crashes, hangs or is silently accepted.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "runtime/bert_config.h"
#include "runtime/checkpoint.h"
#include "base/file_util.h"
#include "data/shard.h"
#include "base/error.h"
#include "base/json_file.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// A vocabulary and prepared data from the fixture corpus, made once per test process.
const fs::path& prepared() {
  static TempDir dir("reliability");
  static bool made = false;
  if (!made) {
    const auto corpus = source_dir() / "tests/data/corpus_small.txt";
    auto v = run_bertlab(fmt::format("vocab --corpus {} --vocab-size 200 --out {}", quote(corpus), quote(dir / "vocab")));
    INFO(v.output);
    REQUIRE(v.exit_code == 0);
    auto p = run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 --dupe-factor 2 --out {}",
                                     quote(corpus), quote(dir / "vocab"), quote(dir / "data")));
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    spit(dir / "config.json", config_to_json(small_train_config()).dump());
    made = true;
  }
  return dir.path();
}

// A copy of the prepared data whose first train shard is rewritten by `edit`.
fs::path data_with(const TempDir& dir, const std::function<void(data::Instance&)>& edit,
                   const std::string& split = "train") {
  fs::copy(prepared() / "data", dir / "data", fs::copy_options::recursive);
  auto meta = nlohmann::json::parse(slurp(dir / "data/meta.json"));
  const fs::path shard = dir / "data" / meta[split]["shards"][0].get<std::string>();
  auto s = data::Shard::open(shard);
  std::vector<data::Instance> all;
  for (size_t i = 0; i < s.size(); ++i) all.push_back(s.get(i));
  edit(all[0]);
  data::write_shard(shard, s.info(), all.data(), all.size());  // a valid checksum over bad content
  return shard;
}

std::string train_args(const fs::path& data, const fs::path& out, int64_t steps, const std::string& extra = "") {
  return fmt::format("train --config {} --data {} --out {} --batch-size 2 --max-steps {} --seed 5 --log-steps 1 "
                     "--eval-batches 1 --threads 1 {}",
                     quote(prepared() / "config.json"), quote(data), quote(out), steps, extra);
}

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("Shards with out-of-range token ids or masked positions are refused on open", "[reliability][data]") {
  const auto vocab = static_cast<int32_t>(data::Shard::open(prepared() / "data" /
      nlohmann::json::parse(slurp(prepared() / "data/meta.json"))["train"]["shards"][0].get<std::string>()).info().vocab_size);
  struct Case {
    const char* what;
    std::function<void(data::Instance&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"id 100000", [](data::Instance& i) { i.tokens[1] = 100000; }, "tokens[1]"},
      {"id 2^31-1", [](data::Instance& i) { i.tokens[2] = INT32_MAX; }, "tokens[2]"},
      {"id -1", [](data::Instance& i) { i.tokens[1] = -1; }, "tokens[1]"},
      {"id = vocab size", [vocab](data::Instance& i) { i.tokens[1] = vocab; }, "tokens[1]"},
      {"label = vocab size + 1", [vocab](data::Instance& i) { i.masked_labels[0] = vocab + 1; }, "masked_labels[0]"},
      {"position past the tokens",
       [](data::Instance& i) { i.masked_positions.back() = static_cast<uint16_t>(i.tokens.size()); },
       "masked_positions"},
  };
  for (const auto& c : cases) {
    SECTION(c.what) {
      TempDir dir("badshard");
      const fs::path shard = data_with(dir, c.edit);
      CHECK_THROWS_WITH(data::Shard::open(shard), Contains(shard.string()) && Contains(c.field));
      auto verify = run_bertlab("prepare --verify " + quote(dir / "data"));
      CHECK(verify.exit_code == 1);
      CHECK_THAT(verify.output, Contains(shard.string()) && Contains(c.field));
      auto train = run_bertlab(train_args(dir / "data", dir / "out", 2));
      CHECK(train.exit_code == 1);
      CHECK_THAT(train.output, Contains(c.field) && !Contains("internal error"));
    }
  }
  SECTION("in the eval split") {
    TempDir dir("badeval");
    const fs::path shard = data_with(dir, [](data::Instance& i) { i.tokens[1] = 100000; }, "eval");
    auto eval = run_bertlab(train_args(prepared() / "data", dir / "out", 1, "--eval-data " + quote(dir / "data")));
    CHECK(eval.exit_code == 1);
    CHECK_THAT(eval.output, Contains(shard.string()) && Contains("tokens[1]"));
  }
}

TEST_CASE("Shard header sizes are checked before the file is read", "[reliability][data]") {
  TempDir dir("shardhdr");
  data::ShardInfo info;
  info.max_seq_length = 32, info.max_predictions = 65536, info.vocab_size = 100;
  data::write_shard(dir / "a.shard", info, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(data::Shard::open(dir / "a.shard"), Contains("a.shard") && Contains("max_predictions"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  info.max_predictions = 5, info.max_seq_length = 70000;
  data::write_shard(dir / "b.shard", info, nullptr, 0);
  CHECK_THROWS_WITH(data::Shard::open(dir / "b.shard"), Contains("max_seq_length"));
}

TEST_CASE("meta.json of the wrong types gives an error naming the field", "[reliability][data]") {
  TempDir dir("meta");
  fs::copy(prepared() / "data", dir / "data", fs::copy_options::recursive);
  const auto good = nlohmann::json::parse(slurp(dir / "data/meta.json"));
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto j = good;
    edit(j);
    spit(dir / "data/meta.json", j.dump());
    return run_bertlab("prepare --verify " + quote(dir / "data"));
  };
  for (auto& [edit, field] : std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) { j["train"]["shards"] = 5; }, "train.shards"},
           {[](nlohmann::json& j) { j["train"]["shards"][0] = 7; }, "train.shards"},
           {[](nlohmann::json& j) { j["train"]["shards"][0] = "../../etc/passwd"; }, "train.shards"},
           {[](nlohmann::json& j) { j["masked_lm_prob"] = "high"; }, "masked_lm_prob"},
           {[](nlohmann::json& j) { j["whole_word_mask"] = 3; }, "whole_word_mask"},
           {[](nlohmann::json& j) { j["format"] = nullptr; }, "format"},
           {[](nlohmann::json& j) { j["train"] = "x"; }, "train"}}) {
    auto r = with(edit);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("meta.json") && Contains(field) && !Contains("internal error"));
  }
  spit(dir / "data/meta.json", "{\"train\": " + nested(100000) + "}");
  auto deep = run_bertlab("prepare --verify " + quote(dir / "data"));
  CHECK(deep.exit_code == 1);
  CHECK_THAT(deep.output, Contains("meta.json") && Contains("nested"));
}

TEST_CASE("JSON nested 100,000 levels deep is refused, not a stack overflow", "[reliability]") {
  TempDir dir("deep");
  spit(dir / "config.json", "{\"vocab_size\": " + nested(100000) + "}");
  CHECK_THROWS_WITH(load_config(dir / "config.json"), Contains("config.json") && Contains("nested"));
  spit(dir / "in.json", "{\"input_ids\": " + nested(100000) + "}");
  auto infer = run_bertlab(fmt::format("infer --model {} --input {} --output {}",
                                       quote(source_dir() / "tests/reference/tiny_bert"), quote(dir / "in.json"),
                                       quote(dir / "out.safetensors")));
  CHECK(infer.exit_code == 1);
  CHECK_THAT(infer.output, Contains("in.json") && Contains("nested"));
  // Within the limit, as deep as anyone writes by hand: parsed.
  CHECK(parse_json_text(nested(kMaxJsonDepth - 1), "x").is_array());
  CHECK_THROWS_WITH(parse_json_text(nested(kMaxJsonDepth + 1), "x"), Contains("nested"));
}

TEST_CASE("Huge sizes in config.json and flags are refused before allocating", "[reliability]") {
  TempDir dir("huge");
  auto j = config_to_json(small_train_config());
  for (const char* key : {"intermediate_size", "vocab_size", "hidden_size", "max_position_embeddings"}) {
    for (int64_t v : {INT64_MAX, int64_t{1} << 31, (int64_t{1} << 53) + 1}) {
      auto k = j;
      k[key] = v;
      spit(dir / "config.json", k.dump());
      CHECK_THROWS_WITH(load_config(dir / "config.json"), Contains("config.json") && Contains(key));
    }
  }
  fs::create_directories(dir / "model");
  auto k = j;
  k["intermediate_size"] = INT64_MAX;
  spit(dir / "model/config.json", k.dump());
  auto infer = run_bertlab(fmt::format("infer --model {} --input {} --output {}", quote(dir / "model"),
                                       quote(dir / "none.json"), quote(dir / "o.safetensors")));
  CHECK(infer.exit_code == 1);
  CHECK_THAT(infer.output, Contains("intermediate_size"));
  auto steps = run_bertlab(train_args(prepared() / "data", dir / "out", INT64_MAX));
  CHECK(steps.exit_code == 1);
  CHECK_THAT(steps.output, Contains("--max-steps"));
  auto threads = run_bertlab(fmt::format("infer --model {} --input {} --output {} --threads 100000",
                                         quote(source_dir() / "tests/reference/tiny_bert"), quote(dir / "none.json"),
                                         quote(dir / "o.safetensors")));
  CHECK(threads.exit_code == 1);
  CHECK_THAT(threads.output, Contains("--threads 100000"));
}

TEST_CASE("prepare with a vocabulary of special tokens only stops with an error", "[reliability][data]") {
  TempDir dir("special");
  fs::create_directories(dir / "vocab");
  spit(dir / "vocab/vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
  auto r = run_shell(fmt::format("timeout 20 {}'{}' prepare --corpus {} --vocab {} --seq-len 32 --out {}", BERTLAB_RUN, BERTLAB_BINARY,
                                 quote(source_dir() / "tests/data/corpus_small.txt"), quote(dir / "vocab"),
                                 quote(dir / "data")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("only special tokens"));
}

TEST_CASE("Outputs to a device are written in place and write errors are reported", "[reliability]") {
  TempDir dir("device");
  const auto model = quote(source_dir() / "tests/reference/tiny_bert");
  spit(dir / "in.json", R"({"input_ids": [[2, 10, 11, 3]]})");
  auto full = run_bertlab(fmt::format("infer --model {} --input {} --output /dev/full", model, quote(dir / "in.json")));
  CHECK(full.exit_code == 1);
  CHECK_THAT(full.output, Contains("/dev/full") && Contains("No space left on device"));
  struct stat st {};
  REQUIRE(::stat("/dev/full", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  auto null = run_bertlab(fmt::format("infer --model {} --input {} --output /dev/null", model, quote(dir / "in.json")));
  CHECK(null.exit_code == 0);
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  auto zero = run_shell(fmt::format("timeout 20 {}'{}' vocab --corpus /dev/zero --vocab-size 100 --out {}",
                                    BERTLAB_RUN, BERTLAB_BINARY, quote(dir / "v")));
  CHECK(zero.exit_code == 1);
  CHECK_THAT(zero.output, Contains("/dev/zero") && Contains("not a regular file"));
}

TEST_CASE("Safetensors the format forbids are refused", "[reliability][safetensors]") {
  TempDir dir("stbad");
  // header JSON + data bytes -> a file
  auto file = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::string h = header;
    std::string blob(8, '\0');
    const uint64_t len = h.size();
    std::memcpy(blob.data(), &len, 8);
    blob += h + std::string(data_bytes, '\x01');
    spit(dir / name, blob);
    return dir / name;
  };
  auto t = [](const char* name, int b, int e) {
    return fmt::format(R"("{}": {{"dtype": "F32", "shape": [{}], "data_offsets": [{}, {}]}})", name, (e - b) / 4, b, e);
  };
  CHECK_NOTHROW(SafetensorsFile(file("ok", "{" + t("a", 0, 8) + "," + t("b", 8, 16) + "}", 16)));
  {
    // The views point into the file's own buffer: moving keeps them valid, copying is refused.
    static_assert(!std::is_copy_constructible_v<SafetensorsFile> && !std::is_copy_assignable_v<SafetensorsFile>);
    SafetensorsFile first(file("moved", "{" + t("a", 0, 8) + "," + t("b", 8, 16) + "}", 16));
    SafetensorsFile moved(std::move(first));
    std::vector<float> b(2);
    moved.read_f32("b", Shape{2}, b.data());
    float expected;
    std::memset(&expected, 1, sizeof expected);
    CHECK(b == std::vector<float>{expected, expected});
  }
  CHECK_NOTHROW(SafetensorsFile(file("reordered", "{" + t("b", 8, 16) + "," + t("a", 0, 8) + "}", 16)));
  CHECK_THROWS_WITH(SafetensorsFile(file("overlap", "{" + t("a", 0, 8) + "," + t("b", 4, 12) + "}", 12)),
                    Contains("overlap") && Contains("'b'"));
  CHECK_THROWS_WITH(SafetensorsFile(file("alias", "{" + t("a", 0, 8) + "," + t("b", 0, 8) + "}", 8)),
                    Contains("overlap"));
  CHECK_THROWS_WITH(SafetensorsFile(file("hole", "{" + t("a", 0, 8) + "," + t("b", 12, 20) + "}", 20)),
                    Contains("unused") && Contains("'b'"));
  CHECK_THROWS_WITH(SafetensorsFile(file("trailing", "{" + t("a", 0, 8) + "}", 12)), Contains("4 trailing bytes"));
  CHECK_THROWS_WITH(SafetensorsFile(file("dup", "{" + t("a", 0, 8) + "," + t("a", 8, 16) + "}", 16)),
                    Contains("'a' appears twice"));
  CHECK_THROWS_WITH(SafetensorsFile(file("notobj", " [1]", 0)), Contains("must begin with '{'"));
  CHECK_THROWS_WITH(SafetensorsFile(file("deep", "{\"a\": " + nested(100000) + "}", 0)), Contains("nested"));
  // Not a regular file: a directory, a symlink loop.
  fs::create_directories(dir / "dir.safetensors");
  CHECK_THROWS_WITH(SafetensorsFile(dir / "dir.safetensors"), Contains("is a directory"));
  fs::create_symlink(dir / "loop.safetensors", dir / "loop.safetensors");
  CHECK_THROWS_WITH(SafetensorsFile(dir / "loop.safetensors"), Contains("loop.safetensors"));
  // The same through the CLI: a clear error, exit 1, never "internal error" or "out of memory".
  for (const char* how : {"dir", "loop"}) {
    fs::create_directories(dir / how);
    fs::copy_file(source_dir() / "tests/reference/tiny_bert/config.json", dir / how / "config.json");
    if (std::string(how) == "dir")
      fs::create_directories(dir / how / "model.safetensors");
    else
      fs::create_symlink(dir / how / "model.safetensors", dir / how / "model.safetensors");
    spit(dir / "in.json", R"({"input_ids": [[2, 10, 11, 3]]})");
    auto r = run_bertlab(fmt::format("infer --model {} --input {} --output {}", quote(dir / how),
                                     quote(dir / "in.json"), quote(dir / "o.safetensors")));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("model.safetensors") && !Contains("internal error") && !Contains("out of memory"));
  }
}

TEST_CASE("Checkpoint manifests detect flipped bits, truncation and edits", "[reliability][train][cli]") {
  TempDir dir("manifest");
  auto run = run_bertlab(train_args(prepared() / "data", dir / "out", 3, "--save-steps 1 --save-total-limit 3"));
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  const fs::path ckpt = dir / "out/checkpoint-3";
  REQUIRE(fs::exists(ckpt / kManifestFile));
  CHECK_NOTHROW(verify_manifest(ckpt));
  // Every file of the checkpoint: a flipped bit and a truncation are found and named.
  int detected = 0, injected = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    const std::string name = e.path().filename().string();
    if (name == kManifestFile) continue;
    for (const char* how : {"flip", "truncate"}) {
      fs::remove_all(dir / "c");
      fs::copy(ckpt, dir / "c", fs::copy_options::recursive);
      std::string bytes = slurp(dir / "c" / name);
      if (std::string(how) == "flip")
        bytes[bytes.size() / 2] ^= 0x10;
      else
        bytes.resize(bytes.size() - 1);
      spit(dir / "c" / name, bytes);
      ++injected;
      try {
        verify_manifest(dir / "c");
      } catch (const Error& err) {
        detected += std::string(err.what()).find(name) != std::string::npos;
      }
    }
  }
  CHECK(injected >= 10);
  CHECK(detected == injected);
  // trainer_state.json with the step edited (and the manifest left alone) is refused at resume.
  fs::remove_all(dir / "c");
  fs::copy(ckpt, dir / "c", fs::copy_options::recursive);
  auto state = nlohmann::json::parse(slurp(dir / "c/trainer_state.json"));
  state["step"] = 56;
  spit(dir / "c/trainer_state.json", state.dump(2) + "\n");
  auto edited = run_bertlab(train_args(prepared() / "data", dir / "out", 6, "--resume " + quote(dir / "c")));
  CHECK(edited.exit_code == 1);
  CHECK_THAT(edited.output, Contains("trainer_state.json"));
  // No manifest (a half-written checkpoint): the message names the newest valid one.
  fs::remove(dir / "out/checkpoint-3" / kManifestFile);
  auto partial = run_bertlab(train_args(prepared() / "data", dir / "out", 6, "--resume " + quote(dir / "out/checkpoint-3")));
  CHECK(partial.exit_code == 1);
  CHECK_THAT(partial.output, Contains("manifest.json") && Contains("checkpoint-2"));
  CHECK(newest_valid_checkpoint(dir / "out") == dir / "out/checkpoint-2");
  // Other data than the checkpoint was trained on.
  TempDir other("otherdata");
  data_with(other, [](data::Instance& i) { i.is_random_next = !i.is_random_next; });
  auto changed = run_bertlab(fmt::format("train --data {} --out {} --batch-size 2 --max-steps 6 --seed 5 --threads 1 --resume {}",
                                         quote(other / "data"), quote(dir / "out"), quote(dir / "out/checkpoint-2")));
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Contains("training data differs"));
  // Directories that only look like checkpoints are skipped, not an internal error.
  fs::create_directories(dir / "out/checkpoint-abc");
  fs::create_directories(dir / "out/checkpoint-99999999999999999999");
  auto odd = run_bertlab(train_args(prepared() / "data", dir / "out", 4,
                                    "--save-steps 1 --save-total-limit 1 --resume " + quote(dir / "out/checkpoint-2")));
  INFO(odd.output);
  CHECK(odd.exit_code == 0);
  CHECK(checkpoints_in(dir / "out") == std::vector<fs::path>{dir / "out/checkpoint-4"});
}

TEST_CASE("A renamed key in trainer_state.json is a clear error", "[reliability][train][cli]") {
  TempDir dir("statekey");
  REQUIRE(run_bertlab(train_args(prepared() / "data", dir / "out", 1)).exit_code == 0);
  const fs::path ckpt = dir / "out/checkpoint-1";
  auto state = nlohmann::json::parse(slurp(ckpt / "trainer_state.json"));
  state["batch_sizes"] = state["batch_size"];
  state.erase("batch_size");
  spit(ckpt / "trainer_state.json", state.dump(2) + "\n");
  write_manifest(ckpt);  // a consistent but wrong checkpoint
  auto r = run_bertlab(train_args(prepared() / "data", dir / "out2", 2, "--resume " + quote(ckpt)));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("trainer_state.json") && Contains("batch_size") && !Contains("internal error"));
}

TEST_CASE("metrics.jsonl holds every step once after a resume over a longer log", "[reliability][train][cli]") {
  TempDir dir("metrics");
  REQUIRE(run_bertlab(train_args(prepared() / "data", dir / "out", 4, "--save-steps 2 --save-total-limit 0")).exit_code == 0);
  // As after a kill at step 4 with checkpoint-2 the newest: lines for steps 3-4 and a torn line.
  {
    std::ofstream out(dir / "out/metrics.jsonl", std::ios::app);
    out << "{\"step\": 5, \"loss\": 1.0}\n{\"step\": 6, \"lo";
  }
  auto r = run_bertlab(train_args(prepared() / "data", dir / "out", 5, "--resume " + quote(dir / "out/checkpoint-2")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<int64_t> steps;
  std::ifstream in(dir / "out/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["step"].get<int64_t>());
  }
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5});
}

TEST_CASE("train --on-nonfinite: stop as before, rollback in the run loop fine-tuning shares", "[reliability][train][cli]") {
  TempDir dir("nonfinite");
  auto stop = run_bertlab(train_args(prepared() / "data", dir / "stop", 3, "--debug-nonfinite-batch 2"));
  CHECK(stop.exit_code == 1);
  CHECK_THAT(stop.output, Contains("error: step 2: the loss is not finite"));
  CHECK(newest_valid_checkpoint(dir / "stop").empty());
  auto r = run_bertlab(train_args(prepared() / "data", dir / "rb", 4,
                                  "--on-nonfinite rollback --save-steps 2 --debug-nonfinite-batch 3"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<int64_t> steps;
  nlohmann::json rollback;
  std::ifstream in(dir / "rb/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["step"].get<int64_t>());
    if (j.value("event", "") == "rollback") rollback = j;
  }
  CHECK(steps == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(rollback.at("to_step") == 2);
  CHECK(read_trainer_state(dir / "rb/checkpoint-4/trainer_state.json").at("loop").at("data_offset") == 1);
}

TEST_CASE("train --on-nonfinite skip with --accum-steps leaves out the micro-batch at fault, or the step when all are",
          "[reliability][train][cli]") {
  TempDir dir("skipmicro");
  auto r = run_bertlab(train_args(prepared() / "data", dir / "out", 4,
                                  "--accum-steps 3 --on-nonfinite skip --nonfinite-limit 4 --debug-nonfinite-batch 2:1,3"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Contains("step 2, micro-batch 1 of 3: the loss is not finite (masked LM nan") &&
                           Contains("left out of the step's update") &&
                           Contains("step 3: all 3 micro-batches are not finite") && Contains("its update skipped"));
  std::vector<int64_t> steps;
  std::vector<std::tuple<int64_t, int64_t, bool, int64_t>> skips;
  std::ifstream in(dir / "out/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) steps.push_back(j["step"].get<int64_t>());
    if (j.value("event", "") == "skip")
      skips.emplace_back(j["step"].get<int64_t>(), j["micro_batch"].get<int64_t>(), j["step_skipped"].get<bool>(),
                         j["dropped_in_window"].get<int64_t>());
  }
  CHECK(steps == std::vector<int64_t>{1, 2, 4});
  CHECK(skips == std::vector<std::tuple<int64_t, int64_t, bool, int64_t>>{
                     {2, 1, false, 1}, {3, 0, true, 2}, {3, 1, true, 3}, {3, 2, true, 4}});
  // The limit counts micro-batches: 1 + 3 is one too many for 3 (the default).
  r = run_bertlab(train_args(prepared() / "data", dir / "limit", 4,
                             "--accum-steps 3 --on-nonfinite skip --debug-nonfinite-batch 2:1,3"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("leaving out 3 more micro-batch(es) would exceed --nonfinite-limit 3: 1 already left out"));
  // stop: as before, whatever micro-batch it is.
  r = run_bertlab(train_args(prepared() / "data", dir / "stop", 4, "--accum-steps 3 --debug-nonfinite-batch 2:1"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("error: step 2: the loss is not finite (masked LM nan"));
}

TEST_CASE("tokenize refuses lines over its limit instead of taking all memory", "[reliability][tokenizer]") {
  const auto vocab = quote(source_dir() / "tests/data/vocab_small");
  auto zeros = run_shell(fmt::format("head -c 20000000 /dev/zero | timeout 20 {}'{}' tokenize --vocab {}",
                                     BERTLAB_RUN, BERTLAB_BINARY, vocab));
  CHECK(zeros.exit_code == 1);
  CHECK_THAT(zeros.output, Contains("standard input:1") && Contains("MiB"));
  auto ok = run_shell(fmt::format("printf 'hello world\\n\\nthe fox' | {}'{}' tokenize --vocab {}", BERTLAB_RUN, BERTLAB_BINARY, vocab));
  CHECK(ok.exit_code == 0);
  CHECK(std::count(ok.output.begin(), ok.output.end(), '\n') == 3);
}

TEST_CASE("MPI ranks started with different settings refuse to start, naming the setting", "[reliability][distributed][mpirun]") {
  TempDir dir("mpimismatch");
  auto rank = [&](int64_t steps) {
    return fmt::format("-np 1 {}'{}' {}", BERTLAB_RUN, BERTLAB_BINARY, train_args(prepared() / "data", dir / "out", steps, "--overwrite"));
  };
  // Before: the rank with fewer steps left, the other waited in its allreduce forever.
  auto r = run_shell(fmt::format("timeout 60 mpirun --allow-run-as-root --oversubscribe {} : {}", rank(3), rank(4)));
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.exit_code != 124);  // not the timeout
  CHECK_THAT(r.output, Contains("rank 1 differs from rank 0: max_steps is 4 here, 3 on rank 0"));
}

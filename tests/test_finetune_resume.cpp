// Fine-tuning under faults (issue 44): checkpoints and --resume ending bit-identical to an
// uninterrupted run, refusals of checkpoints that cannot be resumed, one writer per output
// directory, and recovery from a non-finite loss (skip, rollback) in the run loop that
// pretraining shares.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "base/dir_lock.h"
#include "base/json_file.h"
#include "runtime/checkpoint.h"
#include "runtime/run_loop.h"
#include "runtime/safetensors.h"
#include "tests/finetune_test_util.h"
#include "tests/test_util.h"

using namespace bertlab;
using bertlab::testing::quote;
using bertlab::testing::run_bertlab;
using bertlab::testing::TempDir;
using bertlab::testing::write_text;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The lines of metrics.jsonl without the wall-clock field.
std::vector<nlohmann::json> metric_lines(const fs::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    j.erase("seq_per_s");
    lines.push_back(j);
  }
  return lines;
}

// A sequence-classification set-up: the tiny model (dropout on), 32 training and 16 evaluation
// examples, batches of 4.
struct SeqTask {
  TempDir d{"ft-resume"};
  fs::path model = bertlab::testing::tiny_model_dir(d);
  SeqTask() {
    write_text(d / "train.csv", bertlab::testing::seq_csv(32, 1, false));
    write_text(d / "dev.csv", bertlab::testing::seq_csv(16, 2, false));
  }
  std::string args(const fs::path& out, const std::string& extra = "", int steps = 6, int batch = 4) const {
    return fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {} --max-steps {} --batch-size {} "
                       "--learning-rate 2e-3 --eval-steps 3 --threads 1 {}",
                       quote(model), quote(d / "train.csv"), quote(d / "dev.csv"), quote(out), steps, batch, extra);
  }
};

bool all_finite(const fs::path& safetensors) {
  SafetensorsFile f(safetensors);
  for (const auto& [name, t] : f.tensors()) {
    std::vector<float> v(static_cast<size_t>(numel(t.shape)));
    f.read_f32(name, t.shape, v.data());
    for (float x : v)
      if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("finetune --resume from a checkpoint ends bit-identical to the uninterrupted run", "[finetune][cli][reliability]") {
  SeqTask t;
  auto ref = run_bertlab(t.args(t.d / "ref", "--save-steps 2 --save-total-limit 0"));
  INFO(ref.output);
  REQUIRE(ref.exit_code == 0);
  // Checkpoints every 2 steps in the verified format, each a fine-tuned model directory.
  REQUIRE(checkpoints_in(t.d / "ref").size() == 3);
  for (const auto& c : checkpoints_in(t.d / "ref")) CHECK_NOTHROW(verify_manifest(c));
  const auto cfg = read_json_file(t.d / "ref/checkpoint-4/config.json");
  CHECK(cfg.at("architectures") == nlohmann::json{"BertForSequenceClassification"});
  // At step 4 the best model is step 3's evaluation, kept beside the current one.
  const auto state4 = read_json_file(t.d / "ref/checkpoint-4/trainer_state.json");
  CHECK(state4.at("kind") == "finetune");
  CHECK(state4.at("finetune").at("best_step") == 3);
  CHECK(fs::exists(t.d / "ref/checkpoint-4/best_model.safetensors"));
  CHECK_FALSE(fs::exists(t.d / "ref/checkpoint-2/best_model.safetensors"));  // no evaluation yet

  for (const char* from : {"checkpoint-2", "checkpoint-4"}) {
    DYNAMIC_SECTION("killed after " << from) {
      // As a kill would leave it: the checkpoint, and a log that runs past it into a torn line.
      const fs::path run = t.d / fmt::format("run-{}", from);
      fs::create_directories(run);
      fs::copy(t.d / "ref" / from, run / from, fs::copy_options::recursive);
      write_text(run / "metrics.jsonl", slurp(t.d / "ref/metrics.jsonl") + "{\"step\": 6, \"lo");
      auto r = run_bertlab(t.args(run, "--save-steps 2 --save-total-limit 0 --resume latest"));
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Contains("resuming from"));
      CHECK(slurp(run / "model.safetensors") == slurp(t.d / "ref/model.safetensors"));
      CHECK(slurp(run / "eval_results.json") == slurp(t.d / "ref/eval_results.json"));
      CHECK(slurp(run / "checkpoint-6/model.safetensors") == slurp(t.d / "ref/checkpoint-6/model.safetensors"));
      CHECK(metric_lines(run / "metrics.jsonl") == metric_lines(t.d / "ref/metrics.jsonl"));
    }
  }
}

TEST_CASE("finetune --resume refuses checkpoints it cannot continue, naming the file and the setting", "[finetune][cli][reliability]") {
  SeqTask t;
  REQUIRE(run_bertlab(t.args(t.d / "ref", "--save-steps 2")).exit_code == 0);
  const fs::path ckpt = t.d / "ref/checkpoint-4";
  auto resume = [&](int batch = 4) { return run_bertlab(t.args(t.d / "r", "--resume " + quote(ckpt), 6, batch)); };

  auto r = resume(8);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("cannot resume") && Contains("batch_size was 4 there, 8 now"));
  // Another training file: the same labels, other examples.
  write_text(t.d / "train.csv", bertlab::testing::seq_csv(32, 9, false));
  r = resume();
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("train_sha256"));
  // Another label set (one label more).
  write_text(t.d / "train.csv", "text,label\nthe dog,dog\nthe fox,no-dog\nthe cat,cat\n");
  r = resume();
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("labels was [\"dog\",\"no-dog\"] there"));
  // Another task, refused before the files are read as CoNLL.
  r = run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --out {} --resume {}",
                              quote(t.model), quote(t.d / "train.csv"), quote(t.d / "dev.csv"), quote(t.d / "r"), quote(ckpt)));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("task was \"seq-cls\" there, \"token-cls\" now"));
  // A pretraining checkpoint.
  auto state = read_json_file(ckpt / "trainer_state.json");
  fs::copy(ckpt, t.d / "pre", fs::copy_options::recursive);
  state.erase("kind");
  write_text(t.d / "pre/trainer_state.json", state.dump(2));
  write_manifest(t.d / "pre");
  r = run_bertlab(t.args(t.d / "r", "--resume " + quote(t.d / "pre")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("it is a pretraining checkpoint") && Contains("field 'kind'"));
  // A damaged checkpoint: a flipped bit in the weights is named.
  fs::copy(ckpt, t.d / "bad", fs::copy_options::recursive);
  std::string bytes = slurp(t.d / "bad/model.safetensors");
  bytes[bytes.size() / 2] ^= 0x10;
  write_text(t.d / "bad/model.safetensors", bytes);
  r = run_bertlab(t.args(t.d / "r", "--resume " + quote(t.d / "bad")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("model.safetensors: SHA-256 differs from the manifest"));
  CHECK_THAT(r.output, !Contains("internal error"));
}

TEST_CASE("One run per output directory: the lock names the holder and dies with it", "[reliability][lock]") {
  TempDir d("lock");
  {
    DirLock held(d / "out");
    REQUIRE_THROWS_WITH(DirLock(d / "out"), Contains(fmt::format("process {};", ::getpid())) &&
                                                Contains("in use by another bertlab run"));
    // A command on the locked directory fails at once, naming this process.
    auto r = run_bertlab(fmt::format("train --config {} --data {} --out {} --overwrite --max-steps 1",
                                     quote(bertlab::testing::tiny_fixture() / "config.json"), quote(d / "nodata"),
                                     quote(d / "out")));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains(fmt::format("(process {};", ::getpid())));
  }
  // Released with its holder; a lock file left behind (a killed run's) does not block.
  CHECK(slurp(d / "out" / kLockFile) == fmt::format("{}\n", ::getpid()));
  CHECK_NOTHROW(DirLock(d / "out"));
  // An output directory holding only the lock file counts as empty.
  SeqTask t;
  fs::create_directories(t.d / "out");
  write_text(t.d / "out" / kLockFile, "999999\n");
  auto r = run_bertlab(t.args(t.d / "out", "", 1));
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("metrics.jsonl after a resume ends at the checkpoint's last line, steps repeated by a rollback included", "[reliability]") {
  TempDir d("metricslog");
  // Steps 1-3, a rollback at 3 to checkpoint 1, step 2 again, then a torn line.
  write_text(d / "metrics.jsonl",
             "{\"step\":1}\n{\"step\":2}\n{\"step\":3,\"event\":\"rollback\"}\n{\"step\":2,\"x\":1}\n{\"step\":3,\"x\":1}\n{\"st");
  { MetricsLog log(d.path(), 2); }
  CHECK(slurp(d / "metrics.jsonl") == "{\"step\":1}\n{\"step\":2}\n{\"step\":3,\"event\":\"rollback\"}\n{\"step\":2,\"x\":1}\n");
  { MetricsLog log(d.path(), 1); }
  CHECK(slurp(d / "metrics.jsonl") == "{\"step\":1}\n");
  // The loop state survives its round trip through trainer_state.json; damage is named.
  LoopState s{7, 3, 1, {5, 6}};
  nlohmann::json st{{"step", 7}, {"loop", s.to_json()}};
  const LoopState back = LoopState::from_trainer_state(st, "ts.json");
  CHECK((back.step == 7 && back.data_offset == 3 && back.rollbacks == 1 && back.skipped == std::vector<int64_t>{5, 6}));
  st["loop"]["data_offset"] = -1;
  CHECK_THROWS_WITH(LoopState::from_trainer_state(st, "ts.json"), Contains("ts.json: field 'loop.data_offset' is -1"));
  CHECK(on_nonfinite_from_string("rollback") == OnNonfinite::rollback);
  CHECK_THROWS_WITH(on_nonfinite_from_string("retry"), Contains("--on-nonfinite retry: expected one of stop, skip, rollback"));
}

TEST_CASE("finetune --on-nonfinite: stop as before, skip drops the update, rollback goes back past the data", "[finetune][cli][reliability]") {
  SeqTask t;
  SECTION("stop (the default) ends the run with the step") {
    auto r = run_bertlab(t.args(t.d / "out", "--debug-nonfinite-batch 3"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("error: step 3: the loss is not finite"));
  }
  SECTION("skip drops that step's update, at most --nonfinite-limit times per window") {
    auto r = run_bertlab(t.args(t.d / "out", "--on-nonfinite skip --debug-nonfinite-batch 3"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(all_finite(t.d / "out/model.safetensors"));
    std::vector<int64_t> steps, skipped;
    for (const auto& j : metric_lines(t.d / "out/metrics.jsonl")) {
      if (j.contains("loss")) steps.push_back(j["step"]);
      if (j.value("event", "") == "skip") skipped.push_back(j["step"]);
    }
    CHECK(steps == std::vector<int64_t>{1, 2, 4, 5, 6});
    CHECK(skipped == std::vector<int64_t>{3});
    r = run_bertlab(t.args(t.d / "out2", "--on-nonfinite skip --nonfinite-limit 1 --nonfinite-window 3 "
                                         "--debug-nonfinite-batch 2,4"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("step 4: the loss is not finite") && Contains("1 step(s) already skipped in the last 3"));
    r = run_bertlab(t.args(t.d / "out3", "--on-nonfinite skip --nonfinite-limit 1 --nonfinite-window 2 "
                                         "--debug-nonfinite-batch 2,4"));
    CHECK(r.exit_code == 0);  // step 2 is out of the window by step 4
  }
  SECTION("rollback restarts from the newest checkpoint past the data batches that led to the spike") {
    auto r = run_bertlab(t.args(t.d / "norb", "--on-nonfinite rollback --debug-nonfinite-batch 5"));
    CHECK(r.exit_code == 1);  // refused before the first step: no checkpoints to go back to
    CHECK_THAT(r.output, Contains("--on-nonfinite rollback needs checkpoints") && Contains("--save-steps"));
    CHECK_FALSE(fs::exists(t.d / "norb/metrics.jsonl"));

    r = run_bertlab(t.args(t.d / "out", "--on-nonfinite rollback --save-steps 2 --debug-nonfinite-batch 5"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("step 5: the loss is not finite") && Contains("rolled back to"));
    CHECK(all_finite(t.d / "out/model.safetensors"));
    nlohmann::json rollback;
    std::vector<int64_t> steps;
    for (const auto& j : metric_lines(t.d / "out/metrics.jsonl")) {
      if (j.value("event", "") == "rollback") rollback = j;
      if (j.contains("loss")) steps.push_back(j["step"]);
    }
    CHECK(rollback.at("to_step") == 4);
    CHECK(rollback.at("skipped_data_steps") == nlohmann::json{5, 5});
    CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    // Steps 5 and 6 trained on the data of steps 6 and 7, and the checkpoint says so.
    auto state = read_json_file(t.d / "out/checkpoint-6/trainer_state.json");
    CHECK(state.at("loop").at("data_offset") == 1);
    CHECK(state.at("loop").at("rollbacks") == 1);
    // Killed after the rollback, resumed from the checkpoint before it: the spike, the rollback
    // and the steps after it happen again, and the run ends as the uninterrupted one did.
    fs::create_directories(t.d / "again");
    fs::copy(t.d / "out/checkpoint-4", t.d / "again/checkpoint-4", fs::copy_options::recursive);
    fs::copy_file(t.d / "out/metrics.jsonl", t.d / "again/metrics.jsonl");
    r = run_bertlab(t.args(t.d / "again", "--on-nonfinite rollback --save-steps 2 --debug-nonfinite-batch 5 --resume latest"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(slurp(t.d / "again/model.safetensors") == slurp(t.d / "out/model.safetensors"));
    CHECK(slurp(t.d / "again/eval_results.json") == slurp(t.d / "out/eval_results.json"));
    CHECK(metric_lines(t.d / "again/metrics.jsonl") == metric_lines(t.d / "out/metrics.jsonl"));
    // A spike before the first periodic checkpoint goes back to the start (checkpoint-0).
    r = run_bertlab(t.args(t.d / "early", "--on-nonfinite rollback --save-steps 4 --debug-nonfinite-batch 1"));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("checkpoint-0"));
  }
}

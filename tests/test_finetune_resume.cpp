// Fine-tuning under faults (issue 44): checkpoints and --resume ending bit-identical to an
// uninterrupted run, refusals of checkpoints that cannot be resumed, one writer per output
// directory, and recovery from a non-finite loss (skip, rollback) in the run loop that
// pretraining shares.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <tuple>

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
  CHECK_THROWS_WITH(on_nonfinite_from_string("retry"), Contains("--on-nonfinite: unknown value 'retry' (expected one of: stop, skip, rollback)"));
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
    CHECK_THAT(r.output, Contains("step 4: the loss is not finite") &&
                             Contains("would exceed --nonfinite-limit 1: 1 already left out in the last 3 steps"));
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

namespace {

// The skip records of a metrics.jsonl: (step, micro-batch, step skipped whole).
std::vector<std::tuple<int64_t, int64_t, bool>> skip_records(const fs::path& file) {
  std::vector<std::tuple<int64_t, int64_t, bool>> out;
  for (const auto& j : metric_lines(file))
    if (j.value("event", "") == "skip")
      out.emplace_back(j.at("step").get<int64_t>(), j.at("micro_batch").get<int64_t>(), j.at("step_skipped").get<bool>());
  return out;
}

std::vector<int64_t> loss_steps(const fs::path& file) {
  std::vector<int64_t> steps;
  for (const auto& j : metric_lines(file))
    if (j.contains("loss")) steps.push_back(j["step"]);
  return steps;
}

}  // namespace

TEST_CASE("finetune --on-nonfinite skip with --accum-steps leaves out only the micro-batch at fault", "[finetune][cli][reliability]") {
  // 12 examples of 12 distinct lengths: with --group-by-length every epoch orders them longest
  // first, so with batches of 4 and 3 micro-batches each step reads the same 12, micro-batch 1
  // being the 4 of middle length. The reference is an ordinary run (no skip, 2 micro-batches) on
  // a file without those 4: each of its steps reads the 4 longest, then the 4 shortest, as the
  // skipping run's micro-batches 0 and 2. Dropout off: the reference's second micro-batch has
  // another position, and so would draw other masks. No clipping: the loss divided by the count
  // of 8 examples or of 12 would otherwise give nearly the same update.
  TempDir d("ft-skip-micro");
  const fs::path model = bertlab::testing::tiny_model_dir(d);
  auto cfg = read_json_file(model / "config.json");
  cfg["hidden_dropout_prob"] = 0.0, cfg["attention_probs_dropout_prob"] = 0.0;
  write_text(model / "config.json", cfg.dump(2));
  const std::vector<std::string> words{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "hello", "world", "cafe"};
  std::string all = "text,label\n", without_middle = all;
  for (int n = 14; n >= 3; --n) {  // longest first: rank 14 - n
    std::string text;
    for (int w = 0; w < n; ++w) text += (w ? " " : "") + (n % 2 == 0 && w == n / 2 ? std::string("dog") : words[(n * 7 + w) % 10]);
    const std::string row = fmt::format("\"{}\",{}\n", text, n % 2 == 0 ? "dog" : "no-dog");
    all += row;
    if (14 - n < 4 || 14 - n >= 8) without_middle += row;
  }
  write_text(d / "all.csv", all);
  write_text(d / "without_middle.csv", without_middle);
  write_text(d / "dev.csv", bertlab::testing::seq_csv(16, 2, false));
  auto args = [&](const char* train, const fs::path& out, const std::string& extra) {
    return fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {} --max-steps 2 --batch-size 4 "
                       "--group-by-length --learning-rate 2e-3 --max-grad-norm 0 --threads 1 {}",
                       quote(model), quote(d / train), quote(d / "dev.csv"), quote(out), extra);
  };
  auto skipping = run_bertlab(args("all.csv", d / "skip", "--accum-steps 3 --on-nonfinite skip --debug-nonfinite-batch 1:1,2:1"));
  INFO(skipping.output);
  REQUIRE(skipping.exit_code == 0);
  CHECK_THAT(skipping.output, Contains("step 2, micro-batch 1 of 3: the loss is not finite") &&
                                  Contains("left out of the step's update (--on-nonfinite skip)"));
  auto reference = run_bertlab(args("without_middle.csv", d / "ref", "--accum-steps 2"));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  auto unskipped = run_bertlab(args("all.csv", d / "all", "--accum-steps 3"));
  REQUIRE(unskipped.exit_code == 0);
  // The model, and each step's loss, accuracy and gradient norm, bit for bit.
  CHECK(slurp(d / "skip/model.safetensors") == slurp(d / "ref/model.safetensors"));
  CHECK(slurp(d / "all/model.safetensors") != slurp(d / "ref/model.safetensors"));  // the 4 left out matter
  auto steps = [](const fs::path& file) {
    std::vector<nlohmann::json> out;
    for (auto j : metric_lines(file))
      if (j.contains("loss") || j.contains("eval_loss")) out.push_back(j);
    return out;
  };
  CHECK(steps(d / "skip/metrics.jsonl") == steps(d / "ref/metrics.jsonl"));
  // One record per micro-batch left out, the step's update applied without it.
  CHECK(skip_records(d / "skip/metrics.jsonl") ==
        std::vector<std::tuple<int64_t, int64_t, bool>>{{1, 1, false}, {2, 1, false}});
  for (const auto& j : metric_lines(d / "skip/metrics.jsonl"))
    if (j.value("event", "") == "skip") CHECK_THAT(j.at("reason").get<std::string>(), Contains("micro-batch 1 of 3"));
}

TEST_CASE("finetune --on-nonfinite skip with --accum-steps: the window counts micro-batches, a step with all of them "
          "at fault is skipped, a resume is exact", "[finetune][cli][reliability]") {
  SeqTask t;
  const std::string accum = "--accum-steps 3 --on-nonfinite skip ";
  SECTION("--nonfinite-limit counts micro-batches, a whole step counting all of its") {
    auto r = run_bertlab(t.args(t.d / "a", accum + "--nonfinite-limit 2 --nonfinite-window 10 --debug-nonfinite-batch 2:0,2:2,4:1"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("step 4: the loss is not finite") &&
                             Contains("leaving out 1 more micro-batch(es) would exceed --nonfinite-limit 2: 2 already "
                                      "left out in the last 10 steps"));
    CHECK(skip_records(t.d / "a/metrics.jsonl") == std::vector<std::tuple<int64_t, int64_t, bool>>{{2, 0, false}, {2, 2, false}});
    r = run_bertlab(t.args(t.d / "b", accum + "--nonfinite-limit 3 --nonfinite-window 10 --debug-nonfinite-batch 2:0,2:2,4:1"));
    CHECK(r.exit_code == 0);
    // Out of the window by step 5.
    r = run_bertlab(t.args(t.d / "c", accum + "--nonfinite-limit 2 --nonfinite-window 3 --debug-nonfinite-batch 2:0,2:2,5:1"));
    CHECK(r.exit_code == 0);
    // A whole step of 3 micro-batches needs 3.
    r = run_bertlab(t.args(t.d / "d", accum + "--nonfinite-limit 2 --debug-nonfinite-batch 3"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("step 3: all 3 micro-batches are not finite") &&
                             Contains("leaving out 3 more micro-batch(es) would exceed --nonfinite-limit 2"));
  }
  SECTION("all micro-batches at fault: the step's update is dropped, as without accumulation") {
    for (const char* hook : {"3", "3:0,3:1,3:2:grad"}) {
      const fs::path out = t.d / fmt::format("all-{}", std::string(hook).size());
      auto r = run_bertlab(t.args(out, accum + "--debug-nonfinite-batch " + hook));
      INFO(r.output);
      REQUIRE(r.exit_code == 0);
      CHECK_THAT(r.output, Contains("step 3: all 3 micro-batches are not finite") && Contains("its update skipped"));
      CHECK(loss_steps(out / "metrics.jsonl") == std::vector<int64_t>{1, 2, 4, 5, 6});
      CHECK(skip_records(out / "metrics.jsonl") ==
            std::vector<std::tuple<int64_t, int64_t, bool>>{{3, 0, true}, {3, 1, true}, {3, 2, true}});
      CHECK(all_finite(out / "model.safetensors"));
    }
    // stop with one micro-batch at fault: as before.
    auto r = run_bertlab(t.args(t.d / "stop", "--accum-steps 3 --debug-nonfinite-batch 3:1"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("error: step 3: the loss is not finite"));
    // The hook names micro-batches the steps have.
    r = run_bertlab(t.args(t.d / "bad", "--accum-steps 3 --debug-nonfinite-batch 3:3"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("--debug-nonfinite-batch 3:3: a step has micro-batches 0 to 2 (--accum-steps 3)"));
    r = run_bertlab(t.args(t.d / "bad2", "--debug-nonfinite-batch 3:x"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Contains("--debug-nonfinite-batch 3:x: expected STEP[:MICRO[:loss|grad]]"));
  }
  SECTION("a resume after micro-batches were left out ends as the uninterrupted run") {
    // Dropout on; micro-batch 2 of step 5 with finite loss but non-finite gradients.
    const std::string flags = accum + "--save-steps 2 --save-total-limit 0 --debug-nonfinite-batch 2:1,5:2:grad";
    auto r = run_bertlab(t.args(t.d / "ref", flags));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Contains("step 5, micro-batch 2 of 3: gradients are not finite; first: grad of"));
    CHECK(skip_records(t.d / "ref/metrics.jsonl") == std::vector<std::tuple<int64_t, int64_t, bool>>{{2, 1, false}, {5, 2, false}});
    CHECK(read_json_file(t.d / "ref/checkpoint-4/trainer_state.json").at("loop").at("skipped") == nlohmann::json::array({2}));
    for (const char* from : {"checkpoint-2", "checkpoint-4"}) {
      const fs::path run = t.d / fmt::format("run-{}", from);
      fs::create_directories(run);
      fs::copy(t.d / "ref" / from, run / from, fs::copy_options::recursive);
      write_text(run / "metrics.jsonl", slurp(t.d / "ref/metrics.jsonl"));
      auto resumed = run_bertlab(t.args(run, flags + " --resume latest"));
      INFO(resumed.output);
      REQUIRE(resumed.exit_code == 0);
      CHECK(slurp(run / "model.safetensors") == slurp(t.d / "ref/model.safetensors"));
      CHECK(slurp(run / "eval_results.json") == slurp(t.d / "ref/eval_results.json"));
      CHECK(metric_lines(run / "metrics.jsonl") == metric_lines(t.d / "ref/metrics.jsonl"));
    }
  }
}

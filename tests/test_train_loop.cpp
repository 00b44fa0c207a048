// The training loop: gradient accumulation equals one large batch, resume continues bit for
// bit, checkpoints are complete and guarded, divergence stops with a named tensor.
#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <random>
#include <sstream>

#include "ops/peak.h"
#include "runtime/bert_builder.h"
#include "runtime/trainer.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Matchers::Contains;

namespace {

BertConfig small_config() { return small_train_config(); }

// Random sequences with P masked positions each; rows [first, first + B) of a fixed stream.
BertInputs random_batch(const BertConfig& c, int64_t first, int64_t B, int64_t S, int64_t P) {
  BertInputs in;
  in.batch = B, in.seq = S, in.max_predictions = P;
  for (int64_t b = first; b < first + B; ++b) {
    std::mt19937 rng(static_cast<uint32_t>(1000 + b));
    const int64_t len = S - b % 3;  // some padding
    for (int64_t s = 0; s < S; ++s) {
      in.input_ids.push_back(s < len ? static_cast<int32_t>(5 + rng() % (c.vocab_size - 5)) : 0);
      in.token_type_ids.push_back(s >= len / 2 && s < len);
      in.attention_mask.push_back(s < len);
    }
    for (int64_t p = 0; p < P; ++p) {
      in.masked_lm_positions.push_back(static_cast<int32_t>(1 + p * 2));
      in.masked_lm_labels.push_back(p == P - 1 && b % 2 ? -100 : static_cast<int32_t>(rng() % c.vocab_size));
    }
    in.next_sentence_labels.push_back(static_cast<int32_t>(b % 2));
  }
  return in;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("K micro-batches give the update of one K-times larger batch", "[train]") {
  // With K > 1 each GEMM packs (in bf16 also casts) its weights on the first micro-batch of a
  // step and keeps them for the others; after the update they must be read again. Three steps
  // at a learning rate that moves every weight far more than the tolerance catch weights kept
  // too long; a wrong kept copy would change the first step already. The second model's tied
  // decoder (30522 x 288 floats, over 32 MiB) is read unpacked, and in bf16 cast once per step.
  const bool large_decoder = GENERATE(false, true);
  const BertConfig c = large_decoder ? bert_config(30522, 288, 1, 2, 64, 16) : small_config();
  const int64_t S = 12, P = 3, steps = 3;
  const Precision precision = GENERATE(Precision::fp32, Precision::bf16);
  if (precision == Precision::bf16 && !ops::cpu_has_bf16()) {
    WARN("skipped: no native bf16 matmul on this CPU");
    return;
  }
  auto run_with = [&](int64_t micro_batch, int64_t K) {
    Model m = init_model(c, Heads::pretraining, 7);
    RunSpec r;
    r.batch = micro_batch, r.seq = S, r.max_predictions = P, r.dropout = false, r.precision = precision;
    TrainStepper stepper(m, r, OptimizerConfig{}, 1);
    std::vector<StepStats> stats;
    for (int64_t step = 1; step <= steps; ++step) {
      std::vector<BertInputs> micro;
      for (int64_t k = 0; k < K; ++k)
        micro.push_back(random_batch(c, (step * K + k) * micro_batch, micro_batch, S, P));
      stats.push_back(stepper.step(micro, step, 1e-3f));
    }
    CHECK((stepper.executor().kept_weight_bytes() > 0) == (K > 1));
    return std::pair{std::vector<float>(m.params.arena(), m.params.arena() + m.params.arena_size()), stats};
  };
  auto [one, s1] = run_with(4, 1);
  auto [accum, s4] = run_with(1, 4);
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(one[i] - accum[i])));
  fmt::print("accumulation ({}{}): 4 x 1 vs 1 x 4 sequences, {} steps, max parameter difference {:.3g}, last loss {} vs {}\n",
             to_string(precision), large_decoder ? ", unpacked decoder" : "", steps, worst, s1.back().loss(),
             s4.back().loss());
  // bf16: the same rounded inputs, the f32 sums of the GEMMs in another order; Adam magnifies
  // such differences for the many decoder rows whose gradients are nearly zero (its first
  // update is lr * g / (|g| + eps): a gradient near zero whose last bits change moves the
  // weight by up to 2 lr), so no rounding bound holds there. Weights kept one step too long
  // differ by about the learning rate, 1e-3: the large decoder is held to a tenth of it (fp32
  // measured 4.7e-7 on x86-64 and 1.04e-5 on aarch64 under qemu, where oneDNN sums in another
  // order).
  const double tol = large_decoder ? 1e-4 : (precision == Precision::fp32 ? 1e-6 : 1e-5);
  for (size_t i = 0; i < s1.size(); ++i) {
    CHECK(s1[i].masked == s4[i].masked);
    CHECK(s4[i].loss() == Approx(s1[i].loss()).epsilon(tol));
    CHECK(s4[i].grad_norm == Approx(s1[i].grad_norm).epsilon(10 * tol));
  }
  CHECK(worst <= tol);
}

TEST_CASE("train, checkpoints and an exact resume on a small prepared corpus", "[train][cli]") {
  TempDir dir("train");
  const auto src = source_dir();
  // A tiny vocabulary and prepared data from the fixture corpus.
  REQUIRE(run_bertlab(fmt::format("vocab --corpus {} --vocab-size 200 --out {}",
                                  quote(src / "tests/data/corpus_small.txt"), quote(dir / "vocab"))).exit_code == 0);
  auto prep = run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 --dupe-factor 4 --out {}",
                                      quote(src / "tests/data/corpus_small.txt"), quote(dir / "vocab"),
                                      quote(dir / "data")));
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_to_json(small_config()).dump();
  }
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --accum-steps 2 --lr 1e-3 "
      "--warmup-steps 2 --seed 3 --log-steps 1 --eval-batches 1 --threads 2",
      quote(dir / "config.json"), quote(dir / "data"));

  auto full = run_bertlab(common + " --max-steps 6 --out " + quote(dir / "full"));
  INFO(full.output);
  REQUIRE(full.exit_code == 0);
  CHECK_THAT(full.output, Contains("step 6/6") && Contains("seq/s") && Contains("eval at step 6"));
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "metrics.jsonl"})
    CHECK(fs::exists(dir / "full" / f));

  // The NSP loss is printed and logged with NSP; masked LM only has no NSP field at all.
  auto mlm_only = run_bertlab(common + " --max-steps 2 --eval-steps 1 --no-nsp --out " + quote(dir / "mlm-only"));
  INFO(mlm_only.output);
  REQUIRE(mlm_only.exit_code == 0);
  CHECK_THAT(full.output, Contains("nsp "));
  CHECK_THAT(mlm_only.output, Contains("eval at step 2") && !Contains("nsp"));
  auto nsp_fields = [](const fs::path& file) {
    int train_lines = 0, eval_lines = 0, with_nsp = 0;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      j.contains("eval_mlm_accuracy") ? ++eval_lines : ++train_lines;
      with_nsp += j.contains("nsp_loss") || j.contains("eval_nsp_loss");
    }
    return std::array<int, 3>{train_lines, eval_lines, with_nsp};
  };
  const auto with = nsp_fields(dir / "full/metrics.jsonl"), without = nsp_fields(dir / "mlm-only/metrics.jsonl");
  CHECK(with[2] == with[0] + with[1]);
  CHECK(with[1] >= 1);
  CHECK(without == std::array<int, 3>{2, 2, 0});

  auto first = run_bertlab(common + " --max-steps 6 --save-steps 3 --out " + quote(dir / "part"));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // Resume from the step-3 checkpoint of the second run into a fresh directory.
  auto resumed = run_bertlab(common + " --max-steps 6 --resume " + quote(dir / "part/checkpoint-3") + " --out " + quote(dir / "resumed"));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);

  // The loss sequence of steps 4..6 and the final weights equal the uninterrupted run's.
  auto losses = [&](const fs::path& file) {
    std::vector<std::string> out;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(fmt::format("{}:{}", j["step"].get<int>(), j["loss"].dump()));
    }
    return out;
  };
  auto full_losses = losses(dir / "full/metrics.jsonl");
  auto resumed_losses = losses(dir / "resumed/metrics.jsonl");
  REQUIRE(full_losses.size() == 6);
  REQUIRE(resumed_losses.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(resumed_losses[i] == full_losses[3 + i]);
  CHECK(slurp(dir / "resumed/model.safetensors") == slurp(dir / "full/model.safetensors"));

  // Guards: an existing output directory, a checkpoint of another shape, a partial checkpoint.
  auto exists = run_bertlab(common + " --max-steps 6 --out " + quote(dir / "full"));
  CHECK(exists.exit_code == 1);
  CHECK_THAT(exists.output, Contains("exists") && Contains("--overwrite"));

  auto other = small_config();
  other.hidden_size = 32;
  {
    std::ofstream cfg(dir / "other.json");
    cfg << config_to_json(other).dump();
  }
  auto wrong_shape = run_bertlab(fmt::format("train --config {} --data {} --batch-size 4 --accum-steps 2 --seed 3 --max-steps 6 --resume {} --out {}",
                                             quote(dir / "other.json"), quote(dir / "data"),
                                             quote(dir / "part/checkpoint-6"), quote(dir / "x")));
  CHECK(wrong_shape.exit_code == 1);
  CHECK_THAT(wrong_shape.output, Contains("another shape") && Contains("hidden_size"));
  // A changed batch layout cannot resume exactly.
  auto changed = run_bertlab(fmt::format("train --data {} --batch-size 2 --seed 3 --max-steps 8 --resume {} --out {}",
                                         quote(dir / "data"), quote(dir / "part/checkpoint-6"), quote(dir / "y")));
  CHECK(changed.exit_code == 1);
  CHECK_THAT(changed.output, Contains("cannot resume") && Contains("batch_size"));

  fs::copy(dir / "part/checkpoint-6", dir / "broken", fs::copy_options::recursive);
  fs::remove(dir / "broken/optimizer.safetensors");
  auto partial = run_bertlab(common + " --max-steps 8 --resume " + quote(dir / "broken") + " --out " + quote(dir / "z"));
  CHECK(partial.exit_code == 1);
  CHECK_THAT(partial.output, Contains("incomplete") && Contains("optimizer.safetensors"));
}

TEST_CASE("A checkpoint of another model shape is refused", "[train]") {
  TempDir dir("ckpt");
  Model m = init_model(small_config(), Heads::pretraining, 1);
  TrainingState s(m.params);
  save_checkpoint(dir / "checkpoint-1", m, s, {{"format", "bertlab-trainer-state"}, {"version", 1}, {"step", 1}}, {});
  auto other = small_config();
  other.intermediate_size = 48;
  Model m2 = init_model(other, Heads::pretraining, 1);
  TrainingState s2(m2.params);
  CHECK_THROWS_WITH(load_checkpoint(dir / "checkpoint-1", m2, s2),
                    Contains("another shape") && Contains("intermediate_size"));
  // Truncated weights: a clear error naming the file.
  fs::resize_file(dir / "checkpoint-1/model.safetensors", 100);
  TrainingState s3(m.params);
  CHECK_THROWS_WITH(load_checkpoint(dir / "checkpoint-1", m, s3), Contains("model.safetensors"));
}

TEST_CASE("Divergence stops with the step and the first non-finite tensor", "[train]") {
  const BertConfig c = small_config();
  Model m = init_model(c, Heads::pretraining, 7);
  RunSpec r;
  r.batch = 2, r.seq = 12, r.max_predictions = 3;
  TrainStepper stepper(m, r, OptimizerConfig{}, 1);
  BertInputs batch = random_batch(c, 0, 2, 12, 3);
  // Poison one weight: the forward pass, and so the loss, becomes non-finite.
  m.params.data("bert.encoder.layer.1.intermediate.dense.weight")[5] = std::numeric_limits<float>::infinity();
  std::vector<float> before(m.params.arena(), m.params.arena() + m.params.arena_size());
  CHECK_THROWS_WITH(stepper.step(std::span(&batch, 1), 4, 1e-3f), Contains("step 4") && Contains("not finite"));
  std::vector<float> after(m.params.arena(), m.params.arena() + m.params.arena_size());
  CHECK(std::equal(before.begin(), before.end(), after.begin(), after.end(),
                   [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
}

namespace {
// A masked-LM-only model and its stepper (3 micro-batches of 2 sequences per step).
struct MlmTrainee {
  Model model;
  TrainStepper stepper;
  MlmTrainee(const BertConfig& c, bool dropout)
      : model(init_model(c, Heads::pretraining, 7)), stepper(model, [&] {
          RunSpec r;
          r.batch = 2, r.seq = 12, r.max_predictions = 3, r.nsp = false, r.dropout = dropout;
          return r;
        }(), OptimizerConfig{}, 1) {}
  std::vector<float> params() const { return {model.params.arena(), model.params.arena() + model.params.arena_size()}; }
  std::vector<float> grads() {
    const auto& g = stepper.state().grads;
    return {g.arena(), g.arena() + g.arena_size()};
  }
};
}  // namespace

TEST_CASE("train step, skip with accumulation: only the micro-batch at fault is left out, the update that of the others alone",
          "[train][nonfinite]") {
  // Step 2's micro-batch 1 of 3 gives a non-finite loss (or only non-finite gradients); the
  // step must update with micro-batches 0 and 2 alone, the losses divided by their counts, each
  // with its own dropout stream. The reference is a plain step of the normal path: without
  // dropout over micro-batches 0 and 2 alone; with dropout over 0, a micro-batch that
  // contributes nothing (every label -100: no count, zero gradients) and 2, so that 2 keeps its
  // position, and so its dropout masks.
  const BertConfig c = small_config();
  const bool dropout = GENERATE(false, true);
  const auto kind = GENERATE(NonfiniteKind::loss, NonfiniteKind::gradients);
  INFO("dropout " << dropout << ", injected into the " << (kind == NonfiniteKind::loss ? "loss" : "gradients"));
  auto batches = [&](int64_t step) {
    std::vector<BertInputs> micro;
    for (int64_t k = 0; k < 3; ++k) micro.push_back(random_batch(c, (step * 3 + k) * 2, 2, 12, 3));
    return micro;
  };
  MlmTrainee skipped(c, dropout), reference(c, dropout), unskipped(c, dropout);
  for (auto* t : {&skipped, &reference, &unskipped}) t->stepper.step(batches(1), 1, 1e-3f);

  MicroBatchPolicy policy;
  policy.may_drop = 1;
  policy.inject = {{2, 1, kind}};
  const StepStats s = skipped.stepper.step(batches(2), 2, 1e-3f, policy);
  REQUIRE(s.dropped.size() == 1);
  CHECK(s.dropped[0].micro == 1);
  CHECK_THAT(s.dropped[0].reason, Contains("step 2, micro-batch 1 of 3: ") &&
                                      Contains(kind == NonfiniteKind::loss ? "the loss is not finite"
                                                                                : "gradients are not finite; first: grad of"));
  std::vector<BertInputs> others = batches(2);
  if (dropout) {
    for (auto& label : others[1].masked_lm_labels) label = -100;
  } else {
    others.erase(others.begin() + 1);
  }
  const StepStats r = reference.stepper.step(others, 2, 1e-3f);
  unskipped.stepper.step(batches(2), 2, 1e-3f);
  // The loss is divided by the masked tokens of micro-batches 0 and 2 alone.
  CHECK(s.masked == batches(2)[0].masked_count() + batches(2)[2].masked_count());
  CHECK(r.masked == s.masked);
  CHECK(s.mlm_loss == r.mlm_loss);
  CHECK(s.grad_norm == r.grad_norm);
  // Bit for bit: the gradients (before clipping) and the parameters after the update.
  CHECK(skipped.grads() == reference.grads());
  CHECK(skipped.params() == reference.params());
  // Micro-batch 1 matters: with it the update differs.
  CHECK(unskipped.params() != reference.params());
  // The next step goes on as in the reference.
  skipped.stepper.step(batches(3), 3, 1e-3f);
  reference.stepper.step(batches(3), 3, 1e-3f);
  CHECK(skipped.params() == reference.params());
}

TEST_CASE("train step, skip with accumulation: all micro-batches at fault, or more than allowed, leave the step undone",
          "[train][nonfinite]") {
  const BertConfig c = small_config();
  MlmTrainee t(c, true);
  std::vector<BertInputs> micro;
  for (int64_t k = 0; k < 3; ++k) micro.push_back(random_batch(c, k * 2, 2, 12, 3));
  t.stepper.step(micro, 1, 1e-3f);
  const auto before = t.params();
  const auto moments = [&] {
    const auto& m = t.stepper.state().exp_avg;
    return std::vector<float>(m.arena(), m.arena() + m.arena_size());
  };
  const auto moments_before = moments();
  auto fails = [&](MicroBatchPolicy policy) -> NonfiniteError {
    try {
      t.stepper.step(micro, 2, 1e-3f, policy);
    } catch (const NonfiniteError& e) {
      return e;
    }
    FAIL("the step did not fail");
    return NonfiniteError("");
  };
  // Every micro-batch (the hook's STEP alone), within the allowance: the step is undone.
  NonfiniteError all = fails({3, {{2, NonfiniteInjection::kEveryMicroBatch, NonfiniteKind::loss}}});
  CHECK_THAT(all.what(), Contains("step 2: all 3 micro-batches are not finite"));
  CHECK(all.at_fault.size() == 3);
  // Two of three with one allowed.
  NonfiniteError two = fails({1, {{2, 0, NonfiniteKind::loss}, {2, 2, NonfiniteKind::gradients}}});
  CHECK_THAT(two.what(), Contains("step 2: 2 of 3 micro-batches are not finite"));
  REQUIRE(two.at_fault.size() == 2);
  CHECK((two.at_fault[0].micro == 0 && two.at_fault[1].micro == 2));
  // Nothing allowed (stop, rollback, or the window's allowance used up): as without skip.
  NonfiniteError none = fails({0, {{2, 1, NonfiniteKind::loss}}});
  CHECK_THAT(none.what(), Contains("step 2: the loss is not finite (masked LM nan"));
  CHECK(none.at_fault.size() == 1);
  CHECK(t.params() == before);
  CHECK(moments() == moments_before);
}

TEST_CASE("Masked-LM-only training has no pooler or NSP head and the same masked-LM loss", "[train][nsp]") {
  const BertConfig c = small_config();
  const int64_t S = 12, P = 3, B = 4;
  RunSpec r;
  r.batch = B, r.seq = S, r.max_predictions = P, r.dropout = false, r.mode = RunMode::train, r.nsp = false;
  const Graph g = build_bert(c, r);
  for (const auto& t : g.tensors()) {
    INFO(t.name);
    CHECK_FALSE(t.name.starts_with("cls.seq_relationship"));
    CHECK_FALSE(t.name.starts_with("bert.pooler"));
    CHECK(t.name != "next_sentence_labels");
  }
  StepStats s_nsp;
  {
    Model with_nsp = init_model(c, Heads::pretraining, 7);
    RunSpec rr = r;
    rr.nsp = true;
    TrainStepper stepper(with_nsp, rr, OptimizerConfig{}, 1);
    std::vector<BertInputs> micro{random_batch(c, 0, B, S, P)};
    s_nsp = stepper.step(micro, 1, 1e-3f);
  }
  Model init = init_model(c, Heads::pretraining, 7);
  Model m = init_model(c, Heads::pretraining, 7);
  RunSpec rr = r;
  TrainStepper stepper(m, rr, OptimizerConfig{}, 1);
  std::vector<BertInputs> micro{random_batch(c, 0, B, S, P)};
  const StepStats s = stepper.step(micro, 1, 1e-3f);
  // The masked-LM loss does not depend on the NSP head (dropout off): equal up to rounding.
  CHECK(s.mlm_loss == Approx(s_nsp.mlm_loss).epsilon(1e-6));
  CHECK(s.nsp_loss == 0);
  CHECK(s_nsp.nsp_loss > 0);
  int untouched = 0, moved = 0;
  for (const auto& p : m.params.params()) {
    const bool head = p.name.starts_with("cls.seq_relationship") || p.name.starts_with("bert.pooler");
    const float* now = m.params.data(p.name);
    const float* before = init.params.data(p.name);
    const float* grad = stepper.state().grads.data(p.name);
    bool same = true, zero_grad = true;
    for (int64_t i = 0; i < p.numel(); ++i) same &= now[i] == before[i], zero_grad &= grad[i] == 0.f;
    INFO(p.name);
    if (head) {
      CHECK(same);
      CHECK(zero_grad);
      ++untouched;
    } else if (!same) {
      ++moved;
    }
  }
  CHECK(untouched == 4);  // pooler and NSP weight and bias: saved as initialised, as HF's BertForPreTraining expects
  CHECK(moved > 10);
}

TEST_CASE("Without dropout the training forward equals the evaluation forward", "[train][dropout]") {
  const BertConfig c = small_config();
  const int64_t S = 12, P = 3, B = 4;
  for (bool dropout : {false, true}) {
    Model m = init_model(c, Heads::pretraining, 3);
    RunSpec r;
    r.batch = B, r.seq = S, r.max_predictions = P, r.dropout = dropout;
    TrainStepper stepper(m, r, OptimizerConfig{}, 1);
    const BertInputs batch = random_batch(c, 0, B, S, P);
    const StepStats eval = stepper.evaluate(batch);  // never has dropout
    std::vector<BertInputs> micro{batch};
    const StepStats train = stepper.step(micro, 1, 1e-3f);  // losses of the forward before the update
    INFO("dropout " << dropout << ": train loss " << train.loss() << ", eval loss " << eval.loss());
    if (dropout)
      CHECK(std::abs(train.loss() - eval.loss()) > 1e-4);
    else
      CHECK(train.loss() == eval.loss());
  }
}

TEST_CASE("The one-cycle schedule is triangular: linear up to the peak, linear down to 0", "[train][schedule]") {
  TrainOptions o;
  o.lr = 2e-3f;
  o.max_steps = 10;
  o.schedule = LrSchedule::one_cycle;
  // Hugging Face's convention: the schedule is evaluated at the 0-based step index t.
  auto expected = [&](int64_t t, double peak_at) {
    return t < peak_at ? 2e-3 * t / peak_at : 2e-3 * (o.max_steps - t) / (o.max_steps - peak_at);
  };
  for (int64_t step = 1; step <= 10; ++step) CHECK(learning_rate(o, step) == Approx(expected(step - 1, 5)).margin(1e-9));
  CHECK(learning_rate(o, 6) == Approx(2e-3));  // the peak in the middle
  CHECK(learning_rate(o, 1) == 0);
  o.warmup_steps = 2;  // an explicit peak
  for (int64_t step = 1; step <= 10; ++step) CHECK(learning_rate(o, step) == Approx(expected(step - 1, 2)).margin(1e-9));
  o.schedule = LrSchedule::linear;  // unchanged: the warmup is only what is given
  o.warmup_steps = 0;
  CHECK(learning_rate(o, 1) == Approx(2e-3));
}

TEST_CASE("The wsd schedule: linear warmup, a hold at the peak, linear decay over the last steps", "[train][schedule]") {
  TrainOptions o;
  o.lr = 1e-3f;
  o.max_steps = 10;
  o.warmup_steps = 2;
  o.schedule = LrSchedule::wsd;
  o.decay_steps = 4;
  check_lr_schedule(o);
  // By hand, at the 0-based step index t: warmup t/2 for t < 2; the peak for t = 2..6; then
  // (10 - t)/4 of it for t = 7, 8, 9 (the decay reaches 0 at t = 10, as the linear schedule does).
  const double by_hand[10] = {0, 0.5, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25};
  for (int64_t step = 1; step <= 10; ++step)
    CHECK(learning_rate(o, step) == Approx(1e-3 * by_hand[step - 1]).margin(1e-9));
  // A floor: the decay ends at 10% of the peak; the same decay given as a fraction of the run.
  o.min_lr_ratio = 0.1;
  CHECK(learning_rate(o, 10) == Approx(1e-3 * (0.1 + 0.9 * 0.25)).margin(1e-9));
  CHECK(learning_rate(o, 5) == Approx(1e-3).margin(1e-9));
  o.decay_steps = 0, o.decay_ratio = 0.4;
  CHECK(wsd_decay_steps(o) == 4);
  CHECK(learning_rate(o, 9) == Approx(1e-3 * (0.1 + 0.9 * 0.5)).margin(1e-9));
  // Warmup and decay that do not fit in the run: the error names the three values.
  o.min_lr_ratio = 0, o.decay_ratio = 0, o.decay_steps = 9;
  CHECK_THROWS_WITH(check_lr_schedule(o), Contains("--warmup-steps 2") && Contains("--decay-steps 9") &&
                                              Contains("--max-steps 10"));
  o.decay_steps = 0, o.decay_ratio = 0.9;
  CHECK_THROWS_WITH(check_lr_schedule(o), Contains("--decay-ratio 0.9 (9 steps)") && Contains("--max-steps 10"));
  o.decay_ratio = 0;
  CHECK_THROWS_WITH(check_lr_schedule(o), Contains("needs a decay"));
  o.schedule = LrSchedule::linear, o.decay_steps = 3;
  CHECK_THROWS_WITH(check_lr_schedule(o), Contains("belong to --lr-schedule wsd"));
}

TEST_CASE("Evaluation batches of other shapes than training give the same statistics", "[train]") {
  const BertConfig c = small_config();
  Model m = init_model(c, Heads::pretraining, 5);
  RunSpec r;
  r.batch = 4, r.seq = 12, r.max_predictions = 3, r.dropout = false;
  TrainStepper stepper(m, r, OptimizerConfig{}, 1);
  const BertInputs in = random_batch(c, 0, 4, 12, 3);
  const StepStats base = stepper.evaluate(in);
  // The same batch with two more masked slots per sequence, unused (label -100): the
  // evaluation graph is rebuilt for 5 slots and must ignore the padding.
  BertInputs wide = in;
  wide.max_predictions = 5;
  wide.masked_lm_positions.clear(), wide.masked_lm_labels.clear();
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t p = 0; p < 5; ++p) {
      wide.masked_lm_positions.push_back(p < 3 ? in.masked_lm_positions[b * 3 + p] : 0);
      wide.masked_lm_labels.push_back(p < 3 ? in.masked_lm_labels[b * 3 + p] : -100);
    }
  }
  const StepStats padded = stepper.evaluate(wide);
  CHECK(padded.masked == base.masked);
  CHECK(padded.mlm_loss == Approx(base.mlm_loss).epsilon(1e-6));
  CHECK(padded.mlm_accuracy == base.mlm_accuracy);
  // Two sequences alone: the rebuilt graph gives their share of the loss, as a plain batch of 2.
  const StepStats two = stepper.evaluate(random_batch(c, 0, 2, 12, 3));
  RunSpec r2 = r;
  r2.batch = 2;
  TrainStepper fresh(m, r2, OptimizerConfig{}, 1);
  const StepStats two_fresh = fresh.evaluate(random_batch(c, 0, 2, 12, 3));
  CHECK(two.masked == two_fresh.masked);
  CHECK(two.mlm_loss == Approx(two_fresh.mlm_loss).epsilon(1e-6));
  // And back to the first shape.
  CHECK(stepper.evaluate(in).mlm_loss == Approx(base.mlm_loss).epsilon(1e-6));
}

TEST_CASE("train --eval-data: other masking is evaluated, another vocabulary refused before training",
          "[train][cli]") {
  TempDir dir("train-eval-data");
  const auto corpus = quote(source_dir() / "tests/data/corpus_small.txt");
  for (int v : {200, 100})
    REQUIRE(run_bertlab(fmt::format("vocab --corpus {} --vocab-size {} --out {}", corpus, v,
                                    quote(dir / fmt::format("vocab{}", v)))).exit_code == 0);
  auto prepare = [&](const char* vocab, const char* flags, const char* out) {
    auto p = run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 --pack {} --out {}", corpus,
                                     quote(dir / vocab), flags, quote(dir / out)));
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
  };
  prepare("vocab200", "--masked-lm-prob 0.4 --max-predictions 13", "train40");
  prepare("vocab200", "--max-predictions 5", "eval15");
  prepare("vocab100", "--max-predictions 5", "other-vocab");
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_to_json(small_config()).dump();
  }
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --lr 1e-3 --max-steps 2 --eval-steps 1 --eval-batches 2 "
      "--no-nsp --threads 2 --log-steps 1",
      quote(dir / "config.json"), quote(dir / "train40"));
  auto ok = run_bertlab(common + " --eval-data " + quote(dir / "eval15") + " --out " + quote(dir / "ok"));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.output, Contains("eval at step 1") && Contains("eval at step 2"));
  auto bad = run_bertlab(common + " --eval-data " + quote(dir / "other-vocab") + " --out " + quote(dir / "bad"));
  INFO(bad.output);
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Contains("--eval-data") && Contains("vocabulary") && !Contains("step 1/2"));
}

// Pretraining recipe flags (docs/training.md#pretraining-recipe): the sinusoidal position
// table and its learning-rate scale, against hand computations and the reference AdamW.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "base/file_util.h"
#include "ops/optimizer.h"
#include "runtime/bert_builder.h"
#include "runtime/recipe.h"
#include "data/shard.h"
#include "runtime/safetensors.h"
#include "runtime/train_step.h"
#include "runtime/trainer.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Matchers::Contains;

namespace {

// Sequences of random ids with P masked positions each, no padding.
BertInputs random_mlm_batch(const BertConfig& c, int64_t B, int64_t S, int64_t P, uint32_t seed) {
  BertInputs in;
  in.batch = B, in.seq = S, in.max_predictions = P;
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      in.input_ids.push_back(static_cast<int32_t>(5 + rng() % (c.vocab_size - 5)));
      in.token_type_ids.push_back(0);
      in.attention_mask.push_back(1);
    }
    for (int64_t p = 0; p < P; ++p) {
      in.masked_lm_positions.push_back(static_cast<int32_t>(1 + 3 * p));
      in.masked_lm_labels.push_back(static_cast<int32_t>(rng() % c.vocab_size));
    }
    in.next_sentence_labels.push_back(0);
  }
  return in;
}

// A tiny vocabulary and packed seq-32 data from the fixture corpus, and a config, in `dir`.
void prepare_packed(const TempDir& dir, const std::string& prepare_flags = "") {
  const auto corpus = quote(source_dir() / "tests/data/corpus_small.txt");
  REQUIRE(run_bertlab(fmt::format("vocab --corpus {} --vocab-size 200 --out {}", corpus, quote(dir / "vocab")))
              .exit_code == 0);
  auto prep = run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 --pack --dupe-factor 4 {} --out {}",
                                      corpus, quote(dir / "vocab"), prepare_flags, quote(dir / "data")));
  INFO(prep.output);
  REQUIRE(prep.exit_code == 0);
  std::ofstream(dir / "config.json") << config_to_json(small_train_config()).dump();
}

std::vector<float> read_tensor(const fs::path& file, const std::string& name, const Shape& shape) {
  std::vector<float> out(static_cast<size_t>(numel(shape)));
  SafetensorsFile(file).read_f32(name, shape, out.data());
  return out;
}

// bertlab's own forward of the model trained in dir/out as it trained (with --residual-scale A:
// LN(A x + G(x)) on the weights as trained, from checkpoint-STEP's residual_form.safetensors),
// against the PyTorch BERT of tests/reference/check_plain_bert.py on the model directory
// written: the last hidden states of a batch with padding must agree within 1e-4.
struct PlainBertCheck {
  int exit_code = -1;
  std::string output;
  double unscaled_apart = 0;  // how far bertlab's forward without the scaling is
};

PlainBertCheck check_plain_bert(const TempDir& dir, const std::string& out, int64_t step, double A) {
  Model trained = load_model(dir / out, Heads::pretraining);
  if (A != 1) {
    SafetensorsFile form(dir / out / fmt::format("checkpoint-{}", step) / "residual_form.safetensors");
    for (const auto& name : residual_branch_outputs(trained.config))
      form.read_f32(name, trained.params.info(name).shape, trained.params.data(name));
  }
  const int64_t B = 2, S = 16;
  std::mt19937 rng(5);
  nlohmann::json ids, types, mask;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> row_ids, row_types, row_mask;
    for (int64_t s = 0; s < S; ++s) {
      row_ids.push_back(static_cast<int32_t>(5 + rng() % (trained.config.vocab_size - 5)));
      row_types.push_back(0);
      row_mask.push_back(b == 1 && s >= 12 ? 0 : 1);  // some padding
    }
    ids.push_back(row_ids), types.push_back(row_types), mask.push_back(row_mask);
  }
  const nlohmann::json input = {{"input_ids", ids}, {"token_type_ids", types}, {"attention_mask", mask}};
  std::ofstream(dir / "input.json") << input.dump();
  const BertInputs in = inputs_from_json(input, "input.json");
  auto forward = [&](double residual_scale) {
    RunSpec r;
    r.batch = B, r.seq = S, r.residual_scale = residual_scale;
    Executor ex(build_bert(trained.config, r), trained.params);
    set_inputs(ex, in);
    ex.run();
    const float* h = ex.output("last_hidden_state");
    return std::vector<float>(h, h + B * S * trained.config.hidden_size);
  };
  const std::vector<float> hidden = forward(A), unscaled = forward(1);
  PlainBertCheck result;
  for (size_t i = 0; i < hidden.size(); ++i)
    result.unscaled_apart = std::max(result.unscaled_apart, double(std::abs(hidden[i] - unscaled[i])));
  const Shape shape{B, S, trained.config.hidden_size};
  write_safetensors(dir / "hidden.safetensors", {{"last_hidden_state", "F32", shape, hidden.data()}});
  auto check = run_shell(fmt::format("/usr/bin/python3 {} {} {} {}", quote(source_dir() / "tests/reference/check_plain_bert.py"),
                                     quote(dir / out), quote(dir / "input.json"), quote(dir / "hidden.safetensors")));
  result.exit_code = check.exit_code, result.output = check.output;
  return result;
}

// The flags of configs/main-job.flags (the main job's recipe), comments and blank lines left out.
std::string main_job_flags() {
  std::ifstream in(source_dir() / "configs/main-job.flags");
  REQUIRE(in);
  std::string flags;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t") != std::string::npos) flags += " " + line;
  }
  return flags;
}

}  // namespace

TEST_CASE("The sinusoidal position table equals the formula, scaled", "[train][recipe]") {
  const BertConfig c = small_train_config();
  Model m = init_model(c, Heads::pretraining, 3);
  const double A = 0.05;
  init_positions_sinusoidal(m.params, c, A);
  const float* pe = m.params.data(kPositionTable);
  const int64_t H = c.hidden_size;
  for (int64_t p = 0; p < c.max_position_embeddings; ++p)
    for (int64_t k = 0; k < H; ++k) {
      const int64_t i = k - k % 2;  // the pair's even index
      const long double angle = p * std::pow(10000.0L, -static_cast<long double>(i) / H);
      const long double want = A * (k % 2 ? std::cos(angle) : std::sin(angle));
      REQUIRE(pe[p * H + k] == Approx(static_cast<double>(want)).margin(1e-7));
    }
  CHECK(pe[1] == Approx(A));  // position 0: sin 0, cos 0
  CHECK(default_position_init_scale(c) == Approx(2 * c.initializer_range));
}

TEST_CASE("A learning-rate scale on the position table gives the reference AdamW step at lr x F", "[train][recipe]") {
  const BertConfig c = small_train_config();
  RunSpec r;
  r.batch = 2, r.seq = 12, r.max_predictions = 3, r.dropout = false, r.nsp = false;
  OptimizerConfig opt;
  opt.max_grad_norm = 0;  // no clipping: the reference takes the raw gradient
  const float lr = 1e-2f, F = 0.25f;
  const BertInputs in = random_mlm_batch(c, 2, 12, 3, 11);
  Model scaled = init_model(c, Heads::pretraining, 5), plain = init_model(c, Heads::pretraining, 5);
  const ParamInfo& info = scaled.params.info(kPositionTable);
  const std::vector<float> before(scaled.params.data(kPositionTable), scaled.params.data(kPositionTable) + info.numel());
  TrainStepper a(scaled, r, opt, 1), b(plain, r, opt, 1);
  a.set_update_scale(kPositionTable, F);
  a.step(std::span(&in, 1), 1, lr);
  b.step(std::span(&in, 1), 1, lr);
  // The reference: torch.optim.AdamW's first step from zero moments, at lr x F.
  std::vector<float> want = before, m(before.size(), 0.f), v(before.size(), 0.f);
  ops::AdamHyper h{lr * F, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, 1, 1.f};
  ops::adamw_update_reference(want.data(), m.data(), v.data(), a.state().grads.data(kPositionTable), info.numel(), h, true);
  double worst = 0, moved = 0;
  for (int64_t i = 0; i < info.numel(); ++i) {
    worst = std::max(worst, double(std::abs(scaled.params.data(kPositionTable)[i] - want[i])));
    moved = std::max(moved, double(std::abs(want[i] - before[i])));
  }
  INFO("worst " << worst << ", largest step " << moved);
  CHECK(moved > 1e-3);  // the rows of the 12 positions moved by about lr x F
  CHECK(worst <= 1e-7);
  // Every other parameter took the unscaled step.
  for (const auto& p : scaled.params.params()) {
    if (p.name == kPositionTable) continue;
    for (int64_t i = 0; i < p.numel(); ++i) REQUIRE(scaled.params.data(p.name)[i] == plain.params.data(p.name)[i]);
  }
}

TEST_CASE("train --position-init sinusoidal with a frozen start, and resume refused without it", "[train][recipe][cli]") {
  TempDir dir("recipe-pos");
  prepare_packed(dir);
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --lr 1e-3 --no-nsp --seed 3 --log-steps 1 --eval-batches 1 --threads 2",
      quote(dir / "config.json"), quote(dir / "data"));
  // A learning-rate scale of 0 for the first step: after one step the table is the initial one.
  const std::string pos = " --position-init sinusoidal --position-init-scale 0.05 --position-lr-scale 0 --position-lr-steps 1";
  auto one = run_bertlab(common + pos + " --max-steps 1 --out " + quote(dir / "one"));
  INFO(one.output);
  REQUIRE(one.exit_code == 0);
  const BertConfig c = small_train_config();
  const Shape shape{c.max_position_embeddings, c.hidden_size};
  Model expected = init_model(c, Heads::pretraining, 3);
  init_positions_sinusoidal(expected.params, c, 0.05);
  const auto table = read_tensor(dir / "one/model.safetensors", kPositionTable, shape);
  for (size_t i = 0; i < table.size(); ++i) REQUIRE(table[i] == expected.params.data(kPositionTable)[i]);
  // After the first step the scale is 1 again: step 2 moves the table.
  auto two = run_bertlab(common + pos + " --max-steps 2 --save-steps 1 --out " + quote(dir / "two"));
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK(read_tensor(dir / "two/model.safetensors", kPositionTable, shape) != table);
  CHECK(read_tensor(dir / "two/checkpoint-1/model.safetensors", kPositionTable, shape) == table);
  // Resume with the same settings continues; without them, or with another value, it is refused.
  auto same = run_bertlab(common + pos + " --max-steps 2 --resume " + quote(dir / "two/checkpoint-1") + " --out " +
                          quote(dir / "same"));
  INFO(same.output);
  CHECK(same.exit_code == 0);
  auto without = run_bertlab(common + " --max-steps 2 --resume " + quote(dir / "two/checkpoint-1") + " --out " +
                             quote(dir / "without"));
  CHECK(without.exit_code == 1);
  CHECK_THAT(without.output, Contains("cannot resume") && Contains("position_init"));
  auto other_scale = run_bertlab(common + " --position-init sinusoidal --position-init-scale 0.05 --max-steps 2 --resume " +
                                 quote(dir / "two/checkpoint-1") + " --out " + quote(dir / "other"));
  CHECK(other_scale.exit_code == 1);
  CHECK_THAT(other_scale.output, Contains("cannot resume") && Contains("position_lr"));
  // A run without them refuses a resume that adds them.
  auto plain = run_bertlab(common + " --max-steps 1 --save-steps 1 --out " + quote(dir / "plain"));
  REQUIRE(plain.exit_code == 0);
  auto added = run_bertlab(common + pos + " --max-steps 2 --resume " + quote(dir / "plain/checkpoint-1") + " --out " +
                           quote(dir / "added"));
  CHECK(added.exit_code == 1);
  CHECK_THAT(added.output, Contains("cannot resume") && Contains("position_init"));
  // A model directory brings its own table: a sinusoidal start on it is refused.
  auto on_model = run_bertlab(fmt::format("train --model {} --data {} --batch-size 4 --no-nsp --max-steps 1 "
                                          "--position-init sinusoidal --out {}",
                                          quote(dir / "one"), quote(dir / "data"), quote(dir / "on-model")));
  CHECK(on_model.exit_code == 1);
  CHECK_THAT(on_model.output, Contains("--position-init") && Contains("--model"));
  auto no_steps = run_bertlab(common + " --position-lr-scale 0.1 --max-steps 1 --out " + quote(dir / "no-steps"));
  CHECK(no_steps.exit_code == 1);
  CHECK_THAT(no_steps.output, Contains("--position-lr-steps"));
}

TEST_CASE("A masking-rate schedule: the masked fraction at its start and end is the rate asked for", "[train][recipe][masking]") {
  TempDir dir("recipe-mask");
  prepare_packed(dir, "--max-predictions 5");  // 15% of 32 tokens: 5 masked positions per sequence
  TrainOptions o;
  o.max_steps = 100;
  o.masked_lm_prob = 0.4, o.masked_lm_prob_final = 0.15;
  CHECK(masked_lm_prob_at(o, 1) == 0.4);
  CHECK(masked_lm_prob_at(o, 100) == Approx(0.15));
  CHECK(masked_lm_prob_at(o, 34) == Approx(0.4 - 0.25 * 33 / 99));
  // The data set opened for rates up to 0.4 has room for round(32 x 0.4) = 13 positions.
  data::PretrainingDataset ds(dir / "data", "train", {true, 7, 0.4});
  REQUIRE(ds.max_predictions() == 13);
  REQUIRE(ds.size() >= 30);
  // The fraction of predicted tokens over N sequences of T tokens. mask_tokens predicts exactly
  // round(T x rate) tokens of every sequence, so the fraction may differ from the rate by the
  // rounding, at most 0.5 / T; a masker that draws each token independently (Hugging Face's
  // collator) would differ by a binomial error of sd sqrt(rate (1 - rate) / (N T)): the tolerance
  // is their sum with 4 sd, which a rate from the wrong end of the schedule (0.4 vs 0.15) misses
  // by far.
  auto measured = [&](double rate, int64_t& tokens) {
    int64_t masked = 0;
    tokens = 0;
    for (size_t epoch = 0; epoch < 64; ++epoch)
      for (size_t i = 0; i < ds.size(); ++i) {
        const auto inst = ds.instance(i, epoch, rate);
        masked += static_cast<int64_t>(inst.masked_positions.size());
        tokens += static_cast<int64_t>(inst.tokens.size());
      }
    return double(masked) / double(tokens);
  };
  for (int64_t step : {int64_t{1}, o.max_steps}) {
    const double rate = masked_lm_prob_at(o, step);
    int64_t tokens = 0;
    const double got = measured(rate, tokens);
    const double tol = 0.5 / double(ds.seq_len()) + 4 * std::sqrt(rate * (1 - rate) / double(tokens));
    INFO("step " << step << ": rate " << rate << ", measured " << got << " over " << tokens << " tokens, tolerance " << tol);
    CHECK(std::abs(got - rate) <= tol);
  }
  // Without dynamic masking the data's masks are fixed: another rate is refused.
  data::PretrainingDataset fixed(dir / "data", "train", {false, 7});
  CHECK_THROWS_WITH(fixed.instance(0, 0, 0.3), Contains("dynamic masking"));
  CHECK_THROWS_WITH(data::PretrainingDataset(dir / "data", "train", {false, 7, 0.3}), Contains("dynamic masking"));
}

TEST_CASE("train --masked-lm-prob with a schedule trains packed data, and its flags are checked", "[train][recipe][masking][cli]") {
  TempDir dir("recipe-mask-cli");
  prepare_packed(dir, "--max-predictions 5");
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --lr 1e-3 --no-nsp --seed 3 --log-steps 1 --eval-batches 1 --threads 2",
      quote(dir / "config.json"), quote(dir / "data"));
  auto ok = run_bertlab(common + " --dynamic-masking --masked-lm-prob 0.4 --masked-lm-prob-final 0.15 --max-steps 4 "
                                 "--save-steps 2 --out " + quote(dir / "ok"));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.output, Contains("step 4/4"));
  auto static_masks = run_bertlab(common + " --masked-lm-prob 0.3 --max-steps 1 --out " + quote(dir / "static"));
  CHECK(static_masks.exit_code == 1);
  CHECK_THAT(static_masks.output, Contains("--masked-lm-prob 0.3") && Contains("--dynamic-masking"));
  auto final_alone = run_bertlab(common + " --dynamic-masking --masked-lm-prob-final 0.15 --max-steps 1 --out " + quote(dir / "f"));
  CHECK(final_alone.exit_code == 1);
  CHECK_THAT(final_alone.output, Contains("--masked-lm-prob-final") && Contains("needs --masked-lm-prob"));
  auto other_rate = run_bertlab(common + " --dynamic-masking --masked-lm-prob 0.3 --max-steps 4 --resume " +
                                quote(dir / "ok/checkpoint-2") + " --out " + quote(dir / "other"));
  CHECK(other_rate.exit_code == 1);
  CHECK_THAT(other_rate.output, Contains("cannot resume") && Contains("masked_lm_prob"));
}

TEST_CASE("train --residual-scale writes the plain BERT it equals (PyTorch reference), and resume continues exactly",
          "[train][recipe][residual][cli]") {
  TempDir dir("recipe-res");
  prepare_packed(dir);
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --lr 2e-3 --no-nsp --no-dropout --seed 3 --log-steps 1 "
      "--eval-batches 1 --threads 2 --max-steps 4",
      quote(dir / "config.json"), quote(dir / "data"));
  auto run = [&](const std::string& flags, const char* out) {
    auto r = run_bertlab(common + " " + flags + " --out " + quote(dir / out));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  };
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  run("", "plain");
  // A = 1.5 is not a power of two: folding (/ A) and unfolding (x A) would round, so the resume
  // reads the tensors as trained from the checkpoint (residual_form.safetensors).
  run("--residual-scale 1.5 --save-steps 2", "part");
  run("--residual-scale 1.5 --resume " + quote(dir / "part/checkpoint-2"), "resumed");
  for (const char* a : {"2", "1.5"}) {
    const double A = std::stod(a);
    const std::string out = fmt::format("full-{}", a);
    run(fmt::format("--residual-scale {}", a), out.c_str());
    if (A == 1.5) CHECK(bytes(dir / "resumed/model.safetensors") == bytes(dir / out / "model.safetensors"));
    // The same tensors, of the same shapes, and the same config as a run without the option.
    auto layout = [](const fs::path& file) {
      std::map<std::string, Shape> names;
      const SafetensorsFile f(file);
      for (const auto& [name, view] : f.tensors()) names[name] = view.shape;
      return names;
    };
    CHECK(layout(dir / out / "model.safetensors") == layout(dir / "plain/model.safetensors"));
    CHECK(bytes(dir / out / "config.json") == bytes(dir / "plain/config.json"));

    const PlainBertCheck check = check_plain_bert(dir, out, 4, A);
    INFO("A = " << a << ": without the scaling the trained weights give outputs up to " << check.unscaled_apart << " away");
    CHECK(check.unscaled_apart > 1e-3);  // the scale matters: a missing fold would be caught far above the 1e-4 tolerance
    INFO(check.output);
    CHECK(check.exit_code == 0);
    CHECK_THAT(check.output, Contains("check_plain_bert: OK"));
  }
  auto without = run_bertlab(common + " --resume " + quote(dir / "part/checkpoint-2") + " --out " + quote(dir / "w"));
  CHECK(without.exit_code == 1);
  CHECK_THAT(without.output, Contains("cannot resume") && Contains("residual_scale"));
}

TEST_CASE("Sequence-length warmup: truncated batches keep their masked positions and train as a shorter graph",
          "[train][recipe][seq_warmup]") {
  // By hand: 2 sequences of 6 tokens, 3 slots; truncated to 4 tokens.
  BertInputs in;
  in.batch = 2, in.seq = 6, in.max_predictions = 3;
  in.input_ids = {2, 10, 11, 12, 13, 14, 2, 20, 21, 22, 23, 24};
  in.token_type_ids.assign(12, 0);
  in.attention_mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0};
  in.masked_lm_positions = {1, 4, 5, 3, 2, 0};
  in.masked_lm_labels = {30, 31, 32, 33, 34, -100};
  in.next_sentence_labels = {0, 0};
  const BertInputs t = truncate_sequences(in, 4);
  CHECK(t.seq == 4);
  CHECK(t.input_ids == std::vector<int32_t>{2, 10, 11, 12, 2, 20, 21, 22});
  CHECK(t.attention_mask == std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(t.masked_lm_positions == std::vector<int32_t>{1, 0, 0, 3, 2, 0});
  CHECK(t.masked_lm_labels == std::vector<int32_t>{30, -100, -100, 33, 34, -100});
  CHECK_THROWS_WITH(truncate_sequences(in, 7), Contains("expected 1 to 6"));

  // A stepper built for 12 tokens, given batches cut to 8, takes the steps of a stepper built
  // for 8 tokens: the same parameters, optimizer moments included (the second step's update
  // reads them).
  const BertConfig c = small_train_config();
  RunSpec r;
  r.batch = 2, r.seq = 12, r.max_predictions = 3, r.dropout = false, r.nsp = false;
  RunSpec r8 = r;
  r8.seq = 8;
  Model a = init_model(c, Heads::pretraining, 5), b = init_model(c, Heads::pretraining, 5);
  TrainStepper long_graph(a, r, OptimizerConfig{}, 1), short_graph(b, r8, OptimizerConfig{}, 1);
  for (int64_t step = 1; step <= 2; ++step) {
    const BertInputs cut = truncate_sequences(random_mlm_batch(c, 2, 12, 3, static_cast<uint32_t>(20 + step)), 8);
    const StepStats sa = long_graph.step(std::span(&cut, 1), step, 1e-2f);
    const StepStats sb = short_graph.step(std::span(&cut, 1), step, 1e-2f);
    CHECK(sa.loss() == sb.loss());
    CHECK(sa.masked == sb.masked);
  }
  for (const auto& p : a.params.params())
    for (int64_t i = 0; i < p.numel(); ++i) REQUIRE(a.params.data(p.name)[i] == b.params.data(p.name)[i]);
  // And back to full length.
  const BertInputs full = random_mlm_batch(c, 2, 12, 3, 30);
  CHECK(std::isfinite(long_graph.step(std::span(&full, 1), 3, 1e-2f).loss()));
}

TEST_CASE("train --seq-len-warmup on packed data, and its checks", "[train][recipe][seq_warmup][cli]") {
  TempDir dir("recipe-seqwarm");
  prepare_packed(dir);
  const std::string common = fmt::format(
      "train --config {} --data {} --batch-size 4 --lr 1e-3 --no-nsp --seed 3 --log-steps 1 --eval-batches 1 --threads 2",
      quote(dir / "config.json"), quote(dir / "data"));
  auto ok = run_bertlab(common + " --seq-len-warmup 2:16 --max-steps 4 --save-steps 2 --out " + quote(dir / "ok"));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.output, Contains("step 4/4"));
  auto without = run_bertlab(common + " --max-steps 4 --resume " + quote(dir / "ok/checkpoint-2") + " --out " + quote(dir / "w"));
  CHECK(without.exit_code == 1);
  CHECK_THAT(without.output, Contains("cannot resume") && Contains("seq_len_warmup"));
  auto too_long = run_bertlab(common + " --seq-len-warmup 2:32 --max-steps 4 --out " + quote(dir / "long"));
  CHECK(too_long.exit_code == 1);
  CHECK_THAT(too_long.output, Contains("--seq-len-warmup 2:32") && Contains("below the data's sequence length 32"));
  auto malformed = run_bertlab(common + " --seq-len-warmup 16 --max-steps 4 --out " + quote(dir / "m"));
  CHECK(malformed.exit_code == 1);
  CHECK_THAT(malformed.output, Contains("--seq-len-warmup 16: expected STEPS:LEN"));
}

TEST_CASE("The main job's recipe writes a standard BERT: the PyTorch model on its checkpoint gives bertlab's outputs",
          "[train][recipe][main_job][cli]") {
  // configs/main-job.flags as scripts/demo.sh passes them, with its schedule (warmup-stable-decay,
  // the last 20% a decay), for 5 steps on tiny packed data at 40% masking; then the written
  // model directory in the independent PyTorch BERT (check_plain_bert.py).
  TempDir dir("recipe-main-job");
  prepare_packed(dir, "--masked-lm-prob 0.4 --max-predictions 13");
  const std::string flags = main_job_flags();
  auto r = run_bertlab(fmt::format("train --config {} --data {} --out {} --batch-size 4 --max-steps 5 --log-steps 1 "
                                   "--eval-batches 1 --threads 2 --lr-schedule wsd --warmup-steps 1 --decay-ratio 0.2 {}",
                                   quote(dir / "config.json"), quote(dir / "data"), quote(dir / "main"), flags));
  INFO(flags);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  // The eval line counts the training sequences seen: 5 steps of 4.
  nlohmann::json last_eval;
  std::ifstream metrics(dir / "main/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (auto j = nlohmann::json::parse(line); j.contains("eval_mlm_accuracy")) last_eval = j;
  CHECK(last_eval.at("step") == 5);
  CHECK(last_eval.at("sequences") == 20);
  const auto state = nlohmann::json::parse(read_file(dir / "main/checkpoint-5/trainer_state.json"));
  const double A = state.value("residual_scale", 1.0);
  const PlainBertCheck check = check_plain_bert(dir, "main", 5, A);
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Contains("check_plain_bert: OK"));
}

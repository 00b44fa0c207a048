// The plateau diagnostics of train's evaluation (runtime/eval_diagnostics.h,
// data/context_yardsticks.h): the neighbour yardsticks against
// tests/reference/mlm_context_baseline.py on the same prepared data, the hidden-state cosine
// and attention entropy against plain loops and hand-computed cases, and the report page in
// headless Chromium.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <random>

#include "report/metrics_page.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"
#include "runtime/trainer.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// Mean pairwise cosine of the real positions of one sequence, pair by pair in double.
double plain_cosine(const float* hidden, const int32_t* mask, int64_t S, int64_t H) {
  double sum = 0;
  int64_t pairs = 0;
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) {
      if (i == j || !mask[i] || !mask[j]) continue;
      double dot = 0, ni = 0, nj = 0;
      for (int64_t h = 0; h < H; ++h) {
        dot += double(hidden[i * H + h]) * hidden[j * H + h];
        ni += double(hidden[i * H + h]) * hidden[i * H + h];
        nj += double(hidden[j * H + h]) * hidden[j * H + h];
      }
      sum += ni > 0 && nj > 0 ? dot / std::sqrt(ni * nj) : 0.0;
      ++pairs;
    }
  return sum / double(pairs);
}

// A corpus of short sentences from a small grammar (so that neighbours tell something and
// counts tie), `docs` documents of 6 to 9 sentences, one sentence per line.
void write_grammar_corpus(const fs::path& file, int docs) {
  const std::vector<std::string> det{"the", "a", "this", "every"}, adj{"quick", "lazy", "old", "red", "small", "bright"},
      noun{"fox", "dog", "cat", "bird", "farmer", "river", "house", "tree", "child"},
      verb{"sees", "chases", "likes", "finds", "follows", "watches"}, adv{"slowly", "today", "again", "quietly"};
  std::mt19937 rng(7);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::ofstream out(file);
  for (int d = 0; d < docs; ++d) {
    for (int s = 0, n = 6 + int(rng() % 4); s < n; ++s) {
      std::string line = pick(det) + (rng() % 2 ? " " + pick(adj) : "") + " " + pick(noun) + " " + pick(verb) + " " +
                         pick(det) + " " + pick(noun) + (rng() % 3 == 0 ? " " + pick(adv) : "") + ".";
      line[0] = static_cast<char>(std::toupper(line[0]));
      out << line << "\n";
    }
    out << "\n";
  }
}

nlohmann::json last_eval_record(const fs::path& metrics) {
  std::ifstream in(metrics);
  nlohmann::json last;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("eval_mlm_accuracy")) last = j;
  }
  return last;
}

}  // namespace

TEST_CASE("position cosine: identical rows give 1, random rows the pairwise mean of a plain loop", "[diagnostics]") {
  const int64_t B = 3, S = 7, H = 5;
  std::vector<float> hidden = random_vector(B * S * H, 11);
  std::vector<int32_t> mask(B * S, 1);
  for (int64_t s = 4; s < S; ++s) mask[1 * S + s] = 0;  // sequence 1: 4 real positions
  for (int64_t s = 1; s < S; ++s) mask[2 * S + s] = 0;  // sequence 2: one alone, no pair
  RepresentationSums sums;
  add_position_cosines(sums, hidden.data(), mask.data(), B, S, H);
  CHECK(sums.sequences == 2);
  const double want = (plain_cosine(&hidden[0], &mask[0], S, H) + plain_cosine(&hidden[S * H], &mask[S], S, H)) / 2;
  CHECK(sums.mean_cosine() == Approx(want).margin(1e-12));
  // Every position the same vector (scaled): cosine 1; opposite halves of a pair: -1.
  std::vector<float> same(S * H);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) same[s * H + h] = float(s + 1) * float(h - 2);
  RepresentationSums one;
  add_position_cosines(one, same.data(), mask.data(), 1, S, H);
  CHECK(one.mean_cosine() == Approx(1.0).margin(1e-12));
  std::vector<float> opposite{1, 2, 3, -1, -2, -3};
  const std::vector<int32_t> two{1, 1};
  RepresentationSums minus;
  add_position_cosines(minus, opposite.data(), two.data(), 1, 2, 3);
  CHECK(minus.mean_cosine() == Approx(-1.0).margin(1e-12));
}

TEST_CASE("attention entropy: uniform rows give log(n), random rows the sum of a plain loop", "[diagnostics]") {
  const int64_t B = 2, heads = 3, S = 6;
  const std::vector<int32_t> mask{1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};  // 6 and 3 real tokens
  // Uniform over the real keys, as a zero score matrix gives.
  std::vector<float> uniform(B * heads * S * S, 0.f);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = b == 0 ? 6 : 3;
    for (int64_t r = 0; r < heads * S; ++r)
      for (int64_t k = 0; k < n; ++k) uniform[(b * heads * S + r) * S + k] = 1.f / float(n);
  }
  RepresentationSums sums;
  add_attention_entropy(sums, 0, uniform.data(), mask.data(), B, heads, S);
  add_attention_entropy(sums, 1, uniform.data(), mask.data(), B, heads, S);
  CHECK(sums.rows == heads * (6 + 3));
  // Real query rows only: 6 rows of log 6 and 3 of log 3 per head, in each of 2 layers.
  const double want = (6 * std::log(6.0) + 3 * std::log(3.0)) / 9;
  CHECK(sums.mean_entropy() == Approx(want).margin(1e-6));
  REQUIRE(sums.entropy_per_layer().size() == 2);
  CHECK(sums.entropy_per_layer()[1] == Approx(want).margin(1e-6));
  // One-hot rows have no entropy.
  std::vector<float> onehot(B * heads * S * S, 0.f);
  for (int64_t r = 0; r < B * heads * S; ++r) onehot[r * S + r % 3] = 1.f;
  RepresentationSums none;
  add_attention_entropy(none, 0, onehot.data(), mask.data(), B, heads, S);
  CHECK(none.mean_entropy() == 0.0);
  // Random softmax rows against a plain loop.
  std::vector<float> probs = random_vector(B * heads * S * S, 5, 0.01f, 1.f);
  double plain = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q = 0; q < S; ++q) {
        float* p = &probs[((b * heads + h) * S + q) * S];
        double z = 0;
        for (int64_t k = 0; k < S; ++k) z += p[k];
        for (int64_t k = 0; k < S; ++k) p[k] = float(p[k] / z);
        if (!mask[b * S + q]) continue;
        for (int64_t k = 0; k < S; ++k) plain -= double(p[k]) * std::log(double(p[k]));
      }
  RepresentationSums random;
  add_attention_entropy(random, 0, probs.data(), mask.data(), B, heads, S);
  CHECK(random.mean_entropy() == Approx(plain / double(heads * 9)).margin(1e-9));
}

TEST_CASE("evaluation's hidden-state cosine is that of PyTorch's final hidden states", "[diagnostics][golden]") {
  const fs::path fixture = source_dir() / "tests/reference/tiny_bert";
  Model m = load_model(fixture, Heads::pretraining);
  std::ifstream in_file(fixture / "input.json");
  BertInputs in = inputs_from_json(nlohmann::json::parse(in_file), "input.json");
  in.max_predictions = 1;
  for (int64_t b = 0; b < in.batch; ++b)
    in.masked_lm_positions.push_back(1), in.masked_lm_labels.push_back(in.input_ids[b * in.seq + 1]);
  in.next_sentence_labels.assign(in.batch, 0);
  RunSpec r;
  r.batch = in.batch, r.seq = in.seq, r.max_predictions = 1, r.dropout = false;
  TrainStepper stepper(m, r, OptimizerConfig{}, 1);
  RepresentationSums sums;
  const StepStats with = stepper.evaluate(in, &sums);
  // PyTorch's last_hidden_state of the same batch (tests/reference/make_golden.py).
  SafetensorsFile expected(fixture / "expected.safetensors");
  const auto& want = expected.at("last_hidden_state");
  std::vector<float> hidden(numel(want.shape));
  expected.read_f32("last_hidden_state", want.shape, hidden.data());
  const int64_t H = m.config.hidden_size;
  double plain = 0;
  for (int64_t b = 0; b < in.batch; ++b)
    plain += plain_cosine(&hidden[b * in.seq * H], &in.attention_mask[b * in.seq], in.seq, H);
  CHECK(sums.sequences == in.batch);
  CHECK(sums.mean_cosine() == Approx(plain / double(in.batch)).margin(1e-5));
  CHECK(sums.entropy_per_layer().size() == size_t(m.config.num_hidden_layers));
  // The training graph is left as it was: no diagnostic outputs, so its attention stays fused.
  for (const auto& [name, id] : stepper.executor().graph().outputs())
    CHECK((name != "last_hidden_state" && name.rfind("attention_probs.", 0) != 0));
  // The losses do not depend on whether the graph also outputs the diagnostics.
  const StepStats without = stepper.evaluate(in);
  CHECK(without.mlm_loss == Approx(with.mlm_loss).epsilon(1e-6));
  CHECK(without.nsp_loss == Approx(with.nsp_loss).epsilon(1e-6));
}

TEST_CASE("evaluation's attention entropy is log(n) where queries and keys carry nothing", "[diagnostics]") {
  const BertConfig c = small_train_config();
  Model m = init_model(c, Heads::pretraining, 3);
  // Zero query and key projections: every score is 0, every real key equally likely.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    float* w = m.params.data(qkv_name(l, "weight"));
    float* b = m.params.data(qkv_name(l, "bias"));
    std::fill(w, w + 2 * c.hidden_size * c.hidden_size, 0.f);
    std::fill(b, b + 2 * c.hidden_size, 0.f);
  }
  const int64_t B = 3, S = 10;
  const std::vector<int64_t> lengths{10, 7, 4};
  BertInputs in;
  in.batch = B, in.seq = S, in.max_predictions = 1;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      in.input_ids.push_back(s < lengths[b] ? int32_t(5 + (b * 7 + s * 3) % 100) : 0);
      in.token_type_ids.push_back(0);
      in.attention_mask.push_back(s < lengths[b]);
    }
    in.masked_lm_positions.push_back(2), in.masked_lm_labels.push_back(9);
    in.next_sentence_labels.push_back(0);
  }
  RunSpec r;
  r.batch = B, r.seq = S, r.max_predictions = 1, r.dropout = false;
  TrainStepper stepper(m, r, OptimizerConfig{}, 1);
  RepresentationSums sums;
  stepper.evaluate(in, &sums);
  double want = 0;
  for (int64_t n : lengths) want += double(n) * std::log(double(n));
  want /= double(10 + 7 + 4);
  CHECK(sums.rows == c.num_attention_heads * (10 + 7 + 4));
  CHECK(sums.mean_entropy() == Approx(want).margin(1e-5));
  for (double e : sums.entropy_per_layer()) CHECK(e == Approx(want).margin(1e-5));
}

TEST_CASE("train's neighbour yardsticks equal tests/reference/mlm_context_baseline.py on the same data",
          "[train][diagnostics][cli]") {
  TempDir dir("yardsticks");
  write_grammar_corpus(dir / "corpus.txt", 160);
  REQUIRE(run_bertlab(fmt::format("vocab --corpus {} --vocab-size 120 --out {}", quote(dir / "corpus.txt"),
                                  quote(dir / "vocab"))).exit_code == 0);
  {
    std::ofstream cfg(dir / "config.json");
    cfg << config_to_json(small_train_config()).dump();
  }
  // Packed sequences at 40% masking (the main job's kind), and sentence pairs with padding.
  for (const char* kind : {"packed", "pairs"}) {
    {
      INFO(kind);
      const bool packed = std::string(kind) == "packed";
      const fs::path data = dir / kind;
      auto prep = run_bertlab(fmt::format("prepare --corpus {} --vocab {} --seq-len 32 {} --eval-fraction 0.1 --out {}",
                                          quote(dir / "corpus.txt"), quote(dir / "vocab"),
                                          packed ? "--pack --masked-lm-prob 0.4 --max-predictions 13" : "",
                                          quote(data)));
      INFO(prep.output);
      REQUIRE(prep.exit_code == 0);
      // Batch 1 and more evaluation batches than held-out sequences: every one is evaluated.
      const fs::path out = dir / (std::string("run-") + kind);
      auto train = run_bertlab(fmt::format(
          "train --config {} --data {} --out {} --batch-size 1 --max-steps 1 --eval-batches 100000 --threads 2 {}",
          quote(dir / "config.json"), quote(data), quote(out), packed ? "--no-nsp" : ""));
      INFO(train.output);
      REQUIRE(train.exit_code == 0);
      CHECK_THAT(train.output, Contains("neighbour yardsticks: ") && Contains("neighbours: left "));
      auto ref = run_shell(fmt::format("/usr/bin/python3 {} {} --json",
                                       quote(source_dir() / "tests/reference/mlm_context_baseline.py"), quote(data)));
      INFO(ref.output);
      REQUIRE(ref.exit_code == 0);
      const auto want = nlohmann::json::parse(ref.output.substr(ref.output.rfind('{')));
      const auto got = last_eval_record(out / "metrics.jsonl");
      INFO(got.dump());
      const double masked = want["masked"].get<double>();
      REQUIRE(masked > 100);  // enough held-out positions for the comparison to mean something
      CHECK(got["eval_left_neighbour_accuracy"].get<double>() == Approx(want["left"].get<double>() / masked).margin(1e-12));
      CHECK(got["eval_right_neighbour_accuracy"].get<double>() == Approx(want["right"].get<double>() / masked).margin(1e-12));
      CHECK(got["eval_both_neighbours_accuracy"].get<double>() == Approx(want["both"].get<double>() / masked).margin(1e-12));
      // The three differ here, so a swap of two would be seen.
      CHECK(want["left"] != want["right"]);
      CHECK(want["both"] != want["left"]);
      // The representation diagnostics are logged beside them, one entropy per layer.
      CHECK(got["eval_hidden_cosine"].get<double>() > -1.0);
      CHECK(got["eval_hidden_cosine"].get<double>() <= 1.0);
      CHECK(got["eval_attention_entropy"].get<double>() > 0.0);
      CHECK(got["eval_attention_entropy"].get<double>() <= std::log(32.0) + 1e-9);
      CHECK(got["eval_attention_entropy_per_layer"].size() == 2);
    }
  }
  // --no-eval-diagnostics: none of it.
  auto plain = run_bertlab(fmt::format(
      "train --config {} --data {} --out {} --batch-size 2 --max-steps 1 --eval-batches 2 --no-nsp --threads 2 "
      "--no-eval-diagnostics",
      quote(dir / "config.json"), quote(dir / "packed"), quote(dir / "plain")));
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  CHECK_THAT(plain.output, !Contains("neighbour yardsticks:") && !Contains("neighbours:") && Contains("eval at step 1"));
  CHECK(!last_eval_record(dir / "plain" / "metrics.jsonl").contains("eval_hidden_cosine"));
}

TEST_CASE("bertlab report: a run's curve with its yardsticks renders in headless Chromium", "[diagnostics][html]") {
  TempDir dir("metrics_page");
  // A metrics.jsonl as train writes it: step lines, eval lines, a step evaluated twice (a
  // rollback redoes it: the later line counts).
  {
    std::ofstream m(dir / "metrics.jsonl");
    m << R"({"step":1,"loss":7.1,"mlm_loss":7.1,"mlm_accuracy":0.01,"grad_norm":1,"lr":0.001,"seq_per_s":50})" "\n";
    for (int step : {100, 200, 300, 300}) {
      nlohmann::json e = {{"step", step},
                          {"eval_loss", 6.0},
                          {"eval_mlm_loss", 6.0},
                          {"eval_mlm_accuracy", step == 300 ? 0.5 : 0.001 * step},
                          {"eval_most_frequent_accuracy", 0.049},
                          {"eval_left_neighbour_accuracy", 0.134},
                          {"eval_right_neighbour_accuracy", 0.128},
                          {"eval_both_neighbours_accuracy", 0.201},
                          {"eval_hidden_cosine", 0.9 - 0.001 * step},
                          {"eval_attention_entropy", 4.0 - 0.002 * step},
                          {"eval_attention_entropy_per_layer", {4.1 - 0.002 * step, 3.9 - 0.002 * step}}};
      m << e.dump() << "\n";
    }
  }
  auto ok = run_bertlab(fmt::format("report --metrics {} -o {}", quote(dir / "metrics.jsonl"), quote(dir / "p.html")));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  const auto points = read_eval_points(dir / "metrics.jsonl");
  REQUIRE(points.size() == 3);
  CHECK(points.back().mlm_accuracy == 0.5);
  const std::string html = [&] {
    std::ifstream f(dir / "p.html");
    return std::string((std::istreambuf_iterator<char>(f)), {});
  }();
  // The numbers tables hold the values drawn.
  CHECK_THAT(html, Contains("both neighbours") && Contains("<td>0.201</td>") && Contains("<td>0.5</td>") &&
                       Contains("layer 1"));
  const auto charts = render_charts_in_chromium(dir / "p.html", dir.path());
  CHECK(charts.expected == 3);
  CHECK(charts.rendered == 3);
  auto dom = run_shell(fmt::format(
      "timeout 90 chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --user-data-dir={}/chrome-js "
      "--virtual-time-budget=5000 --dump-dom file://{}",
      dir.path().string(), fs::absolute(dir / "p.html").string()));
  REQUIRE(dom.exit_code == 0);
  CHECK_THAT(dom.output, Contains("data-js-errors=\"0\""));

  // Bad input: named file and line, non-zero exit, no page.
  {
    std::ofstream bad(dir / "bad.jsonl");
    bad << R"({"step":1,"eval_mlm_accuracy":0.1})" "\n" << "not json\n";
  }
  auto bad = run_bertlab(fmt::format("report --metrics {} -o {}", quote(dir / "bad.jsonl"), quote(dir / "bad.html")));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Contains("bad.jsonl:2") && Contains("not a JSON object"));
  CHECK(!fs::exists(dir / "bad.html"));
  {
    std::ofstream none(dir / "none.jsonl");
    none << R"({"step":1,"loss":7.1})" "\n";
  }
  auto none = run_bertlab(fmt::format("report --metrics {} -o {}", quote(dir / "none.jsonl"), quote(dir / "n.html")));
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.output, Contains("no evaluation lines"));
  auto missing = run_bertlab(fmt::format("report --metrics {} -o {}", quote(dir / "absent.jsonl"), quote(dir / "m.html")));
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.output, Contains("absent.jsonl"));
}

TEST_CASE("bertlab report with several runs: one chart over the training sequences, and an SVG file",
          "[diagnostics][html]") {
  // Run a at batch 8 and run b at batch 32: by sequences their points interleave; by steps they
  // would not. A third run logged before the sequences were recorded turns the axis into steps.
  TempDir dir("metrics_compare");
  auto write_run = [&](const char* name, int batch, bool sequences) {
    fs::create_directories(dir / name);
    std::ofstream m(dir / name / "metrics.jsonl");
    for (int k = 1; k <= 3; ++k) {
      const int step = k * 100 * 8 / batch;
      nlohmann::json e = {{"step", step}, {"eval_mlm_accuracy", 0.1 * k + (batch == 32 ? 0.05 : 0)},
                          {"eval_most_frequent_accuracy", 0.049}, {"eval_left_neighbour_accuracy", 0.134},
                          {"eval_both_neighbours_accuracy", 0.201}, {"eval_hidden_cosine", 0.3},
                          {"eval_attention_entropy", 3.0}};
      if (sequences) e["sequences"] = step * batch;
      m << e.dump() << "\n";
    }
  };
  write_run("a", 8, true);
  write_run("b", 32, true);
  write_run("old", 8, false);
  auto ok = run_bertlab(fmt::format("report --metrics {} --metrics {} --label batch-8 --label batch-32 -o {} --svg {}",
                                    quote(dir / "a/metrics.jsonl"), quote(dir / "b/metrics.jsonl"),
                                    quote(dir / "c.html"), quote(dir / "c.svg")));
  INFO(ok.output);
  REQUIRE(ok.exit_code == 0);
  const auto read = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  };
  const std::string html = read(dir / "c.html"), svg = read(dir / "c.svg");
  // Both runs at 800, 1600 and 2400 sequences: the table's rows are those x values.
  CHECK_THAT(html, Contains("training sequences") && Contains("batch-32") && Contains("<td>800</td>") &&
                       Contains("<td>2400</td>") && Contains("<td>0.35</td>"));
  CHECK_THAT(svg, StartsWith("<?xml") && Contains("<svg") && Contains("xmlns=\"http://www.w3.org/2000/svg\"") &&
                      Contains("both neighbours") && Contains("batch-8"));
  const auto charts = render_charts_in_chromium(dir / "c.html", dir.path());
  CHECK(charts.expected == 3);
  CHECK(charts.rendered == 3);
  auto steps = run_bertlab(fmt::format("report --metrics {} --metrics {} -o {}", quote(dir / "a/metrics.jsonl"),
                                       quote(dir / "old/metrics.jsonl"), quote(dir / "s.html")));
  REQUIRE(steps.exit_code == 0);
  CHECK_THAT(read(dir / "s.html"), Contains("the optimizer step"));
  auto bad = run_bertlab(fmt::format("report --metrics {} --metrics {} --label one -o {}", quote(dir / "a/metrics.jsonl"),
                                     quote(dir / "b/metrics.jsonl"), quote(dir / "x.html")));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.output, Contains("--label: 1 given for 2 --metrics files"));
  CHECK(!fs::exists(dir / "x.html"));
}

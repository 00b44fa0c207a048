// Fine-tuning heads against PyTorch (tests/reference/make_finetune_golden.py): logits, loss and
// gradients of BertForSequenceClassification and BertForTokenClassification on the tiny model;
// the metrics; and `bertlab finetune` / `predict` end to end, with the written checkpoint
// checked by an independent loader (tests/reference/check_finetuned.py).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <fstream>

#include "runtime/bert_builder.h"
#include "runtime/finetune.h"
#include "runtime/fusion.h"
#include "base/json_file.h"
#include "tests/finetune_test_util.h"
#include "tests/test_util.h"

using namespace bertlab;
using bertlab::testing::TempDir;
using bertlab::testing::quote;
using bertlab::testing::run_bertlab;
using bertlab::testing::run_shell;
using bertlab::testing::tiny_model_dir;
using bertlab::testing::write_text;
using bertlab::testing::seq_csv;
using bertlab::testing::conll;

namespace {

const std::filesystem::path kFixture = std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert";

// Largest |a - b| relative to the largest |b|.
double rel_err(const float* a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < b.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - b[i])), scale = std::max(scale, std::abs(double(b[i])));
  return diff / scale;
}

std::vector<float> read(const SafetensorsFile& f, const std::string& name, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  f.read_f32(name, shape, v.data());
  return v;
}

struct HeadCase {
  Heads heads;
  const char* prefix;
  int64_t labels;
  std::vector<int32_t> label_values;
  double loss;
};

void check_head(const HeadCase& hc) {
  const BertConfig c = load_config(kFixture / "config.json");
  const SafetensorsFile golden(kFixture / "finetune.safetensors");
  BertInputs in = inputs_from_json(read_json_file(kFixture / "input.json"), "input.json");
  const std::string p = hc.prefix;
  Model m = init_model(c, hc.heads, 0, hc.labels);
  load_encoder_weights(m.params, SafetensorsFile(kFixture / "model.safetensors"), false);
  golden.read_f32(p + ".classifier.weight", {hc.labels, c.hidden_size}, m.params.data("classifier.weight"));
  golden.read_f32(p + ".classifier.bias", {hc.labels}, m.params.data("classifier.bias"));
  CHECK(m.params.contains("bert.pooler.dense.weight") == (hc.heads == Heads::sequence_classification));

  RunSpec run;
  run.batch = in.batch, run.seq = in.seq, run.heads = hc.heads, run.num_labels = hc.labels;
  run.dropout = false;
  // Forward: logits of the inference graph.
  run.mode = RunMode::infer;
  Graph ig = build_bert(c, run);
  apply_fusions(ig);
  Executor infer(std::move(ig), static_cast<const ParamStore&>(m.params));
  set_inputs(infer, in);
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < in.batch; ++b)
    for (int64_t s = 0; s < in.seq; ++s) positions.push_back(static_cast<int32_t>(s));
  if (hc.heads == Heads::token_classification) std::copy(positions.begin(), positions.end(), infer.input("token_positions"));
  infer.run();
  const Shape logits_shape = hc.heads == Heads::sequence_classification ? Shape{in.batch, hc.labels}
                                                                       : Shape{in.batch, in.seq, hc.labels};
  auto want_logits = read(golden, p + ".logits", logits_shape);
  CHECK(rel_err(infer.output("logits"), want_logits) < 1e-5);

  // Loss and gradients of the training graph (the loss divided by the labelled count).
  run.mode = RunMode::train;
  Graph tg = build_bert(c, run);
  apply_fusions(tg);
  TrainingState state(m.params);
  Executor train(std::move(tg), m.params, &state);
  set_inputs(train, in);
  if (hc.heads == Heads::token_classification) std::copy(positions.begin(), positions.end(), train.input("token_positions"));
  std::copy(hc.label_values.begin(), hc.label_values.end(), train.input("labels"));
  int64_t labelled = 0;
  for (int32_t l : hc.label_values) labelled += l != -100;
  train.context().nsp_denominator = static_cast<float>(labelled);
  state.grads.zero();
  train.run(nullptr, kForward | kBackward);
  const float* loss = train.output("loss");
  CHECK(loss[2] == Approx(double(labelled)));
  CHECK(loss[0] / loss[2] == Approx(hc.loss).epsilon(1e-5));
  int checked = 0;
  for (const auto& [name, view] : golden.tensors()) {
    if (name.rfind(p + ".grad.", 0) != 0) continue;
    std::string param = name.substr(p.size() + 6);
    std::vector<float> want;
    if (param.find("attention.self.query.") != std::string::npos ||
        param.find("attention.self.value.") != std::string::npos) {
      // One third of the fused QKV gradient.
      const bool value = param.find(".value.") != std::string::npos;
      const std::string suffix = param.substr(param.rfind('.') + 1);
      const std::string layer = param.substr(0, param.find("attention.self.") + 15);
      const std::string fused = layer + "qkv." + suffix;
      const auto& info = m.params.info(fused);
      Shape part = info.shape;
      part[0] /= 3;
      want = read(golden, name, part);
      CAPTURE(name);
      CHECK(rel_err(state.grads.data(fused) + (value ? 2 : 0) * numel(part), want) < 1e-4);
    } else {
      want = read(golden, name, m.params.info(param).shape);
      CAPTURE(name);
      CHECK(rel_err(state.grads.data(param), want) < 1e-4);
    }
    ++checked;
  }
  CHECK(checked >= 7);
}

}  // namespace

TEST_CASE("classification heads match PyTorch: logits, loss, gradients", "[finetune][golden]") {
  auto j = read_json_file(kFixture / "finetune.json");
  SECTION("BertForSequenceClassification") {
    check_head({Heads::sequence_classification, "seq", j.at("num_seq_labels").get<int64_t>(),
                j.at("seq_labels").get<std::vector<int32_t>>(), j.at("seq_loss").get<double>()});
  }
  SECTION("BertForTokenClassification") {
    std::vector<int32_t> labels;
    for (const auto& row : j.at("token_labels"))
      for (const auto& v : row) labels.push_back(v.get<int32_t>());
    check_head({Heads::token_classification, "tok", j.at("num_token_labels").get<int64_t>(), labels,
                j.at("token_loss").get<double>()});
  }
}

TEST_CASE("accuracy, macro-F1 and per-class precision/recall as scikit-learn", "[finetune]") {
  data::LabelSet labels({"a", "b", "c", "d"});
  // Hand-computed: a P 1/2 R 1/2; b P 2/3 R 1; c P 0 R 0 (never predicted); d absent.
  auto r = classification_metrics({0, 0, 1, 1, 2, -100}, {0, 1, 1, 1, 0, 2}, labels);
  CHECK(r.count == 5);
  CHECK(r.accuracy == Approx(0.6));
  REQUIRE(r.per_class.size() == 3);
  CHECK(r.per_class[0].precision == Approx(0.5));
  CHECK(r.per_class[1].precision == Approx(2.0 / 3));
  CHECK(r.per_class[1].recall == Approx(1.0));
  CHECK(r.per_class[1].f1 == Approx(0.8));
  CHECK(r.per_class[2].f1 == 0);
  CHECK(r.macro_f1 == Approx((0.5 + 0.8 + 0.0) / 3));
}

TEST_CASE("finetune + predict: sequence classification, checked by an independent loader", "[finetune][cli]") {
  TempDir d("finetune-seq");
  auto model = tiny_model_dir(d);
  write_text(d / "train.csv", seq_csv(64, 1, true));
  write_text(d / "dev.csv", seq_csv(24, 2, false));
  auto r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {} --max-steps 40 "
                                   "--batch-size 8 --learning-rate 2e-3 --warmup-ratio 0.1 --eval-steps 20 --threads 1",
                                   quote(model), quote(d / "train.csv"), quote(d / "dev.csv"), quote(d / "out")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("truncated 1 of 64 training examples to 40 tokens"));
  CHECK_THAT(r.output, Catch::Contains("newly initialised: classifier.weight, classifier.bias"));
  auto results = read_json_file(d / "out/eval_results.json");
  CHECK(results.at("eval_majority_class_accuracy").get<double>() == Approx(0.5));
  CHECK(results.at("eval_accuracy").get<double>() >= 0.9);  // "dog" or not: learnable
  auto cfg = read_json_file(d / "out/config.json");
  CHECK(cfg.at("architectures") == nlohmann::json{"BertForSequenceClassification"});
  CHECK(cfg.at("id2label") == nlohmann::json{{"0", "dog"}, {"1", "no-dog"}});
  CHECK(cfg.at("label2id") == nlohmann::json{{"dog", 0}, {"no-dog", 1}});
  CHECK(cfg.at("num_labels") == 2);

  write_text(d / "new.csv", "text\nthe lazy dog\nhello world\n\"fox, over\"\n");
  r = run_bertlab(fmt::format("predict --model {} --input {} --output {}", quote(d / "out"), quote(d / "new.csv"),
                              quote(d / "pred.jsonl")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto check = run_shell(fmt::format("/usr/bin/python3 {} {} {} {} 40", quote(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/check_finetuned.py"),
                                     quote(d / "out"), quote(d / "new.csv"), quote(d / "pred.jsonl")));
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("check_finetuned: OK: BertForSequenceClassification, 2 labels, 3 examples"));

  // Bad input.
  r = run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --out {}", quote(d / "out"),
                              quote(d / "train.csv"), quote(d / "dev.csv"), quote(d / "out2")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("--task token-cls: model directory") &&
                           Catch::Contains("fine-tuned for sequence_classification (BertForSequenceClassification"));
  write_text(d / "empty.csv", "");
  r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {}", quote(model),
                              quote(d / "empty.csv"), quote(d / "dev.csv"), quote(d / "out5")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("empty.csv: the file is empty"));
  write_text(d / "nolabel.tsv", "text\tpair\nthe dog\tfox\n");
  r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {}", quote(model),
                              quote(d / "nolabel.tsv"), quote(d / "dev.csv"), quote(d / "out6")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("nolabel.tsv:1: header: no 'label' column (columns: text, pair)"));
  r = run_bertlab(fmt::format("predict --model {} --input {} --output {}", quote(model), quote(d / "new.csv"),
                              quote(d / "pred2.jsonl")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("not a fine-tuned model"));
  CHECK_FALSE(std::filesystem::exists(d / "pred2.jsonl"));
  std::filesystem::remove(model / "vocab.txt");
  r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {}", quote(model),
                              quote(d / "train.csv"), quote(d / "dev.csv"), quote(d / "out3")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("has no tokenizer: vocab.txt is missing"));
  write_text(d / "bad_dev.csv", "text,label\nthe dog,dog\nthe fox,cat\n");
  r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {}", quote(d / "out"),
                              quote(d / "train.csv"), quote(d / "bad_dev.csv"), quote(d / "out4")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("bad_dev.csv:3: field 'label': label 'cat' is not among the 2 labels of the training file"));
}

TEST_CASE("finetune + predict: token classification, checked by an independent loader", "[finetune][cli]") {
  TempDir d("finetune-tok");
  auto model = tiny_model_dir(d);
  write_text(d / "train.conll", conll(64, 3));
  write_text(d / "dev.conll", conll(16, 4));
  auto r = run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --out {} --num-train-epochs 4 "
                                   "--batch-size 8 --learning-rate 3e-3 --metric macro_f1 --threads 1",
                                   quote(model), quote(d / "train.conll"), quote(d / "dev.conll"), quote(d / "out")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("newly initialised: classifier.weight, classifier.bias"));
  auto results = read_json_file(d / "out/eval_results.json");
  CHECK(results.at("eval_accuracy").get<double>() >= 0.9);
  CHECK(results.at("metric") == "macro_f1");
  auto cfg = read_json_file(d / "out/config.json");
  CHECK(cfg.at("architectures") == nlohmann::json{"BertForTokenClassification"});
  CHECK(cfg.at("id2label").size() == 4);
  write_text(d / "words.conll", "the\nunaffable\nfox\n\njumps\n");
  r = run_bertlab(fmt::format("predict --model {} --input {} --output {}", quote(d / "out"), quote(d / "words.conll"),
                              quote(d / "pred.jsonl")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto check = run_shell(fmt::format("/usr/bin/python3 {} {} {} {} 40", quote(std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/check_finetuned.py"),
                                     quote(d / "out"), quote(d / "words.conll"), quote(d / "pred.jsonl")));
  INFO(check.output);
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.output, Catch::Contains("check_finetuned: OK: BertForTokenClassification, 4 labels, 2 examples"));
  // Short training sequences, every evaluation word scored.
  r = run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --out {} --max-steps 2 "
                              "--max-seq-length 8 --eval-max-seq-length 40 --threads 1",
                              quote(model), quote(d / "train.conll"), quote(d / "dev.conll"), quote(d / "out-short")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("training examples to 8 tokens (--max-seq-length"));
  CHECK_THAT(r.output, !Catch::Contains("evaluation examples to"));
  CHECK_THAT(r.output, Catch::Contains("sequence length 8 (evaluation "));
  r = run_bertlab(fmt::format("finetune --task seq-cls --model {} --train {} --eval {} --out {}", quote(d / "out"),
                              quote(d / "train.conll"), quote(d / "dev.conll"), quote(d / "out2")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("--task seq-cls: model directory"));
}

namespace {
// The tiny token-classification model without dropout (its masks follow the batch rows), fine-tuned
// three steps twice on the same data, once with each of `flags`: each run's output and eval_results.json.
std::array<std::pair<std::string, nlohmann::json>, 2> finetune_twice(const TempDir& d, int train_sentences,
                                                                     const std::array<std::string, 2>& flags) {
  auto model = tiny_model_dir(d);
  auto cfg = read_json_file(model / "config.json");
  cfg["hidden_dropout_prob"] = 0.0, cfg["attention_probs_dropout_prob"] = 0.0;
  write_text(model / "config.json", cfg.dump(2));
  write_text(d / "train.conll", conll(train_sentences, 3));
  write_text(d / "dev.conll", conll(40, 5));
  std::array<std::pair<std::string, nlohmann::json>, 2> runs;
  for (size_t i = 0; i < 2; ++i) {
    auto out = d / fmt::format("out{}", i);
    auto r = run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --out {} --max-steps 3 "
                                     "--learning-rate 3e-3 --threads 1 {}",
                                     quote(model), quote(d / "train.conll"), quote(d / "dev.conll"), quote(out), flags[i]));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    runs[i] = {r.output, read_json_file(out / "eval_results.json")};
  }
  return runs;
}
}  // namespace

TEST_CASE("finetune --group-by-length: padding per batch changes no result", "[finetune][cli]") {
  // One training batch holds every example, so grouping only reorders its rows; evaluation runs
  // in batches of similar lengths, each padded to its own longest. Both must give the results of
  // the run padded to the longest example of each set.
  TempDir d("finetune-group");
  const auto runs = finetune_twice(d, 8, {"--batch-size 8", "--batch-size 8 --group-by-length"});
  CHECK(runs[0].first.find("grouped by length") == std::string::npos);
  CHECK(runs[1].first.find("grouped by length") != std::string::npos);
  const auto &plain = runs[0].second, &grouped = runs[1].second;
  CHECK(grouped.at("eval_accuracy").get<double>() == plain.at("eval_accuracy").get<double>());
  CHECK_THAT(grouped.at("eval_loss").get<double>(), Catch::WithinRel(plain.at("eval_loss").get<double>(), 1e-4));
  // Evaluation batches padded to less than the longest example: fewer padded positions.
  CHECK(grouped.at("mean_padded_seq_len").get<double>() <= plain.at("mean_padded_seq_len").get<double>());
}

TEST_CASE("finetune --accum-steps: K micro-batches give the results of one K-times larger batch", "[finetune][cli]") {
  // With accumulation each GEMM packs its weights on a step's first micro-batch and keeps them
  // for the others; three steps at a high learning rate show weights kept too long.
  TempDir d("finetune-accum");
  const auto runs = finetune_twice(d, 24, {"--batch-size 8", "--batch-size 4 --accum-steps 2"});
  const auto &one = runs[0].second, &accum = runs[1].second;
  CHECK(accum.at("eval_accuracy").get<double>() == one.at("eval_accuracy").get<double>());
  CHECK_THAT(accum.at("eval_loss").get<double>(), Catch::WithinRel(one.at("eval_loss").get<double>(), 1e-5));
}

TEST_CASE("finetune --test: the kept model scored once on a split no choice looks at", "[finetune][cli]") {
  // Evaluations at steps 4, 8 and 12 pick the kept model on dev.conll; --test scores that model
  // (not the last one) after the run. With the dev file as the test file too, the test scores
  // must be the kept evaluation's exactly; with another file, those of `predict` with the kept model.
  TempDir d("finetune-test");
  auto model = tiny_model_dir(d);
  write_text(d / "train.conll", conll(48, 3));
  write_text(d / "dev.conll", conll(16, 4));
  write_text(d / "test.conll", conll(12, 9));
  auto run = [&](const std::filesystem::path& test, const std::string& out) {
    return run_bertlab(fmt::format("finetune --task token-cls --model {} --train {} --eval {} --test {} --out {} "
                                   "--max-steps 12 --eval-steps 4 --batch-size 8 --learning-rate 3e-3 --threads 1",
                                   quote(model), quote(d / "train.conll"), quote(d / "dev.conll"), quote(test),
                                   quote(d / out)));
  };
  auto r = run(d / "dev.conll", "same");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto eval = read_json_file(d / "same/eval_results.json"), test = read_json_file(d / "same/test_results.json");
  CHECK(test.at("best_step") == eval.at("best_step"));
  for (const char* key : {"accuracy", "macro_f1", "count", "majority_class_accuracy"})
    CHECK(test.at(std::string("test_") + key) == eval.at(std::string("eval_") + key));
  CHECK_THAT(test.at("test_loss").get<double>(), Catch::WithinRel(eval.at("eval_loss").get<double>(), 1e-6));
  CHECK_THAT(r.output, Catch::Contains("test: accuracy"));

  r = run(d / "test.conll", "other");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  test = read_json_file(d / "other/test_results.json");
  REQUIRE(run_bertlab(fmt::format("predict --model {} --input {} --output {}", quote(d / "other"),
                                  quote(d / "test.conll"), quote(d / "pred.jsonl"))).exit_code == 0);
  // predict's per-word labels against the gold tags of test.conll.
  std::ifstream gold_in(d / "test.conll"), pred_in(d / "pred.jsonl");
  std::vector<std::string> gold;
  for (std::string line; std::getline(gold_in, line);)
    if (!line.empty()) gold.push_back(line.substr(line.find('\t') + 1));
  size_t i = 0, right = 0;
  for (std::string line; std::getline(pred_in, line);) {
    const auto row = nlohmann::json::parse(line);
    for (const auto& label : row.at("labels")) right += i < gold.size() && label == gold[i++];
  }
  REQUIRE(i == gold.size());
  CHECK(test.at("test_count") == static_cast<int64_t>(gold.size()));
  CHECK(test.at("test_accuracy").get<double>() == Approx(double(right) / double(gold.size())));

  write_text(d / "bad.conll", "the\tZZ\n");
  r = run(d / "bad.conll", "bad");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("bad.conll") && Catch::Contains("'ZZ' is not among"));
  CHECK_FALSE(std::filesystem::exists(d / "bad/model.safetensors"));
}

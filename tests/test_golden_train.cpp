// Training golden tests against tests/reference/make_golden.py (PyTorch): losses, every
// parameter gradient, and the losses over 5 AdamW and 5 LAMB steps; gradient accumulation.
#include <catch2/catch.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cmath>
#include <fstream>

#include "runtime/bert_builder.h"
#include "runtime/safetensors.h"
#include "runtime/train_step.h"

using namespace bertlab;

namespace {
const std::filesystem::path kFixture =
    std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert";

nlohmann::json read_json(const char* file) {
  std::ifstream in(kFixture / file);
  return nlohmann::json::parse(in);
}

// The fixture's training batch with 3 masked slots per sequence (one of them padding).
BertInputs training_batch() {
  BertInputs in = inputs_from_json(read_json("train_input.json"), "train_input.json");
  auto labels = read_json("labels.json");
  std::vector<int32_t> dense;
  for (const auto& row : labels.at("masked_lm_labels"))
    for (const auto& v : row) dense.push_back(v.get<int32_t>());
  set_dense_mlm_labels(in, dense, 3, "labels.json");
  for (const auto& v : labels.at("next_sentence_label")) in.next_sentence_labels.push_back(v.get<int32_t>());
  return in;
}

RunSpec run_for(const BertInputs& in) {
  RunSpec r;
  r.batch = in.batch;
  r.seq = in.seq;
  r.max_predictions = in.max_predictions;
  r.dropout = false;
  return r;
}

OptimizerConfig optimizer(OptimizerKind kind) {
  auto c = read_json("train_expected.json").at("optimizer_config");
  OptimizerConfig o;
  o.kind = kind;
  o.beta1 = c.at("betas")[0].get<float>();
  o.beta2 = c.at("betas")[1].get<float>();
  o.eps = c.at("eps").get<float>();
  o.weight_decay = c.at("weight_decay").get<float>();
  o.max_grad_norm = c.at("max_grad_norm").get<float>();
  return o;
}

double l2(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += (double(a[i]) - (b ? b[i] : 0.f)) * (double(a[i]) - (b ? b[i] : 0.f));
  return std::sqrt(s);
}
}  // namespace

TEST_CASE("Tiny BERT losses and gradients match PyTorch", "[golden][train]") {
  Model m = load_model(kFixture, Heads::pretraining);
  BertInputs batch = training_batch();
  TrainStepper stepper(m, run_for(batch), optimizer(OptimizerKind::adamw), 0);
  auto& ex = stepper.executor();
  auto& ctx = ex.context();
  ctx.mlm_denominator = static_cast<float>(batch.masked_count());
  ctx.nsp_denominator = static_cast<float>(batch.batch);
  stepper.state().grads.zero();
  set_inputs(ex, batch);
  ex.run(nullptr, kForward | kBackward);

  auto expected = read_json("train_expected.json");
  const float* mlm = ex.output("mlm_loss");
  const float* nsp = ex.output("nsp_loss");
  CHECK(mlm[0] / mlm[2] == Approx(expected.at("mlm_loss").get<double>()).margin(1e-4));
  CHECK(nsp[0] / nsp[2] == Approx(expected.at("nsp_loss").get<double>()).margin(1e-4));
  CHECK(mlm[2] == expected.at("num_masked").get<double>());

  // Per-tensor relative error ||g - ref|| / max(||ref||, 1e-5): the floor covers gradients that
  // are zero in exact arithmetic (attention key biases), which the reference holds as noise.
  SafetensorsFile ref(kFixture / "gradients.safetensors");
  const auto& grads = stepper.state().grads;
  double worst = 0;
  std::string worst_name;
  int compared = 0;
  auto compare = [&](const std::string& name, const float* got, const Shape& shape) {
    std::vector<float> want(numel(shape));
    ref.read_f32(name, shape, want.data());
    double err = l2(got, want.data(), numel(shape)) / std::max(l2(want.data(), nullptr, numel(shape)), 1e-5);
    ++compared;
    if (err > worst) worst = err, worst_name = name;
  };
  for (const auto& p : grads.params()) {
    const float* g = grads.data(p.name);
    auto qkv = p.name.find("attention.self.qkv.");
    if (qkv == std::string::npos) {
      compare(p.name, g, p.shape);
      continue;
    }
    Shape part = p.shape;
    part[0] /= 3;
    const std::string prefix = p.name.substr(0, qkv) + "attention.self.";
    const std::string suffix = p.name.substr(qkv + 19);
    int i = 0;
    for (const char* which : {"query.", "key.", "value."})
      compare(prefix + which + suffix, g + i++ * numel(part), part);
  }
  fmt::print("golden gradients: {} tensors, worst {} with relative error {:.3g}\n", compared,
             worst_name, worst);
  CHECK(compared == static_cast<int>(ref.tensors().size()));
  CHECK(worst <= 1e-3);
}

TEST_CASE("AdamW and LAMB trajectories match PyTorch over 5 steps", "[golden][train]") {
  auto expected = read_json("train_expected.json");
  const float lr = expected.at("optimizer_config").at("lr").get<float>();
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lamb}) {
    Model m = load_model(kFixture, Heads::pretraining);
    BertInputs batch = training_batch();
    TrainStepper stepper(m, run_for(batch), optimizer(kind), 0);
    const std::string name = to_string(kind);
    auto want = expected.at(name + "_losses").get<std::vector<double>>();
    std::vector<double> got;
    double worst = 0;
    for (int step = 1; step <= 5; ++step) {
      auto s = stepper.step(std::span(&batch, 1), step, lr);
      got.push_back(s.loss());
      CHECK(s.grad_norm == Approx(expected.at(std::string(name) + "_grad_norms_preclip")[step - 1].get<double>()).epsilon(1e-4));
    }
    got.push_back(stepper.evaluate(batch).loss());
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    fmt::print("{} losses: {} (worst abs error {:.2g})\n", name, fmt::join(got, ", "), worst);
    CHECK(worst <= 1e-4);
  }
}

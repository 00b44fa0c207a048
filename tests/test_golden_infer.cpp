// Whole-model golden test: the tiny BERT of tests/reference/make_golden.py (PyTorch) against
// the executor, every output, printing the worst tensor.
#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <cmath>
#include <fstream>

#include "runtime/bert_builder.h"
#include "runtime/fusion.h"
#include "runtime/model.h"
#include "runtime/safetensors.h"

using namespace bertlab;

namespace {
const std::filesystem::path kFixture = std::filesystem::path(BERTLAB_SOURCE_DIR) / "tests/reference/tiny_bert";

BertInputs fixture_inputs(const char* file) {
  std::ifstream in(kFixture / file);
  return inputs_from_json(nlohmann::json::parse(in), file);
}

double run_and_compare(bool fused) {
  Model m = load_model(kFixture, Heads::pretraining);
  REQUIRE(m.from_checkpoint);
  REQUIRE(m.unused_tensors.empty());
  BertInputs in = fixture_inputs("input.json");
  validate_inputs(in, m.config, "input.json");
  RunSpec run;
  run.batch = in.batch;
  run.seq = in.seq;
  Graph g = build_bert(m.config, run);
  if (fused) apply_fusions(g);
  Executor ex(std::move(g), m.params);
  set_inputs(ex, in);
  ex.run();

  SafetensorsFile expected(kFixture / "expected.safetensors");
  double worst = 0;
  std::string worst_name;
  for (const char* name : {"last_hidden_state", "pooler_output", "mlm_logits", "nsp_logits"}) {
    const auto& want = expected.at(name);
    REQUIRE(ex.output_shape(name) == want.shape);
    std::vector<float> ref(numel(want.shape));
    expected.read_f32(name, want.shape, ref.data());
    const float* got = ex.output(name);
    double err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, double(std::abs(got[i] - ref[i])));
    fmt::print("  {:<18} max abs error {:.3g}\n", name, err);
    if (err >= worst) worst = err, worst_name = name;
  }
  fmt::print("golden inference ({}): worst tensor {} with max abs error {:.3g}\n",
             fused ? "fused" : "unfused", worst_name, worst);
  return worst;
}
}  // namespace

TEST_CASE("Tiny BERT matches the PyTorch reference outputs", "[golden][infer]") {
  CHECK(run_and_compare(true) <= 1e-4);
  CHECK(run_and_compare(false) <= 1e-4);
}

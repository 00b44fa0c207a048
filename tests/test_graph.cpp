// Graph IR and BERT builder: shapes, FLOPs and bytes against hand-computed values,
// fusion passes, JSON round trip and config validation.
#include <catch2/catch.hpp>

#include <algorithm>

#include "runtime/bert_builder.h"
#include "base/error.h"
#include "runtime/fusion.h"
#include "runtime/step_rules.h"
#include "test_configs.h"

using namespace bertlab;

namespace {
BertConfig small_config() { return testing::tiny_graph_config(); }
RunSpec run(int64_t b, int64_t s) {
  RunSpec r;
  r.batch = b;
  r.seq = s;
  return r;
}
const Node& node_named(const Graph& g, const std::string& name) {
  auto id = g.find_node(name);
  REQUIRE(id.has_value());
  return g.node(*id);
}
}  // namespace

TEST_CASE("BERT graph has the expected shapes and outputs", "[graph]") {
  auto c = small_config();
  Graph g = build_bert(c, run(2, 7));
  auto out = [&](const std::string& name) {
    for (auto& [n, t] : g.outputs())
      if (n == name) return g.tensor(t).shape;
    FAIL("no output " << name);
    return Shape{};
  };
  CHECK(out("last_hidden_state") == Shape{2, 7, 12});
  CHECK(out("pooler_output") == Shape{2, 12});
  CHECK(out("mlm_logits") == Shape{2, 7, 50});
  CHECK(out("nsp_logits") == Shape{2, 2});
  CHECK(node_named(g, "encoder.1.attention.scores").attrs.at("heads") == 3);

  // Every trainable parameter appears once as a weight tensor (decoder tied).
  int64_t weights = 0;
  for (const auto& t : g.tensors())
    if (t.role == Role::weight) weights += t.numel();
  CHECK(weights == c.parameter_count(true));
}

TEST_CASE("FLOPs and bytes per op kind match hand-computed values", "[graph]") {
  Graph g = build_bert(small_config(), run(2, 7));
  const int64_t M = 14, H = 12, F = 20, S = 7, d = 4, heads = 3, B = 2;
  const auto& qkv = node_named(g, "encoder.0.attention.qkv");
  CHECK(node_flops(g, qkv) == Approx(2.0 * M * 3 * H * H + M * 3 * H));
  CHECK(node_min_bytes(g, qkv) == 4 * (M * H + 3 * H * H + 3 * H + M * 3 * H));
  auto gm = node_gemm(g, qkv);
  REQUIRE(gm);
  CHECK((gm->m == M && gm->n == 3 * H && gm->k == H && gm->trans_b));

  const auto& scores = node_named(g, "encoder.0.attention.scores");
  gm = node_gemm(g, scores);
  CHECK((gm->batch == B * heads && gm->m == S && gm->n == S && gm->k == d));
  CHECK(node_flops(g, scores) == Approx(2.0 * B * heads * S * S * d + 2.0 * B * heads * S * S));
  CHECK(node_min_bytes(g, scores) == 4 * (M * 2 * H + B * S + B * heads * S * S));

  const auto& ctx = node_named(g, "encoder.0.attention.context");
  gm = node_gemm(g, ctx);
  CHECK((gm->m == S && gm->n == d && gm->k == S && !gm->trans_b));
  CHECK(node_min_bytes(g, ctx) == 4 * (B * heads * S * S + M * H + M * H));

  CHECK(node_flops(g, node_named(g, "encoder.0.attention.softmax")) == Approx(5.0 * B * heads * S * S));
  CHECK(node_flops(g, node_named(g, "encoder.0.ffn.layernorm")) == Approx(7.0 * M * H));
  CHECK(node_flops(g, node_named(g, "encoder.0.ffn.gelu")) == Approx(5.0 * M * F));
  const auto& emb = node_named(g, "embeddings");
  CHECK(node_min_bytes(g, emb) == 4 * (2 * M + 3 * M * H + M * H));
  CHECK(node_gemm(g, emb) == std::nullopt);
}

TEST_CASE("Fusion passes rewrite linear epilogues and keep FLOPs", "[graph][fusion]") {
  auto c = small_config();
  Graph plain = build_bert(c, run(1, 5));
  Graph fused = plain;
  auto applied = apply_fusions(fused);
  REQUIRE(applied == std::vector<std::string>{"linear_activation:4", "linear_residual:4"});
  // ffn.gelu x2, pooler.tanh, mlm.gelu fused; 2 residual adds per layer fused.
  CHECK(fused.nodes().size() == plain.nodes().size() - 8);
  double f0 = 0, f1 = 0;
  for (const auto& n : plain.nodes()) f0 += node_flops(plain, n);
  for (const auto& n : fused.nodes()) f1 += node_flops(fused, n);
  CHECK(f1 == Approx(f0));
  const auto& ffn_out = node_named(fused, "encoder.1.ffn.output");
  CHECK(ffn_out.inputs.size() == 4);
  CHECK(node_named(fused, "encoder.1.ffn.intermediate").attrs.at("activation") == "gelu");
  CHECK_FALSE(fused.find_node("encoder.1.ffn.gelu").has_value());

  Graph partly = plain;
  auto only = apply_fusions(partly, {"linear_residual"});
  CHECK(only == std::vector<std::string>{"linear_activation:4"});
  CHECK_THROWS_WITH(apply_fusions(partly, {"nope"}), Catch::Contains("unknown fusion pass 'nope'"));
}

TEST_CASE("The executor runs each layer's attention scores, softmax and context as one step", "[graph][fusion]") {
  auto c = small_config();
  auto attention_runs = [&](RunSpec r) {
    const Graph g = build_bert(c, r);
    const auto runs = fused_steps(g);
    int n = 0;
    for (const auto& node : g.nodes()) {
      const uint8_t k = runs[static_cast<size_t>(node.id)];
      if (k != kFusedAttention) continue;
      ++n;
      CHECK(node.kind == OpKind::attn_scores);
      CHECK(g.node(node.id + 1).kind == OpKind::softmax);
      CHECK(g.node(node.id + 2).kind == OpKind::attn_context);
      CHECK(runs[static_cast<size_t>(node.id) + 1] == 0);
      CHECK(runs[static_cast<size_t>(node.id) + 2] == 0);
      CHECK(node.phase == Phase::forward);
    }
    return n;
  };
  CHECK(attention_runs(run(2, 7)) == c.num_hidden_layers);  // inference
  {  // fewer sequences than threads: apart
    const Graph two = build_bert(c, run(2, 7));
    const auto runs = fused_steps(two, 3);
    CHECK(std::count(runs.begin(), runs.end(), kFusedAttention) == 0);
    const auto enough = fused_steps(two, 2);
    CHECK(std::count(enough.begin(), enough.end(), kFusedAttention) == c.num_hidden_layers);
  }
  RunSpec train = run(2, 7);
  train.mode = RunMode::train;
  // With attention dropout the context reads the dropout's output, not the softmax's: no run.
  CHECK(attention_runs(train) == 0);
  // Without dropout the forward chain is one step; the backward's recomputed probabilities
  // have other readers (the softmax and dV gradients), so they stay apart.
  train.dropout = false;
  CHECK(attention_runs(train) == c.num_hidden_layers);
  // A second reader of the probabilities (a graph output) keeps the forward apart too.
  Graph g = build_bert(c, run(2, 7));
  g.mark_output(node_named(g, "encoder.0.attention.softmax").outputs.at(0), "probs0");
  int runs0 = 0;
  for (uint8_t k : fused_steps(g)) runs0 += k == kFusedAttention;
  CHECK(runs0 == c.num_hidden_layers - 1);
}

TEST_CASE("Graph JSON round trip", "[graph]") {
  Graph g = build_bert(small_config(), run(2, 3));
  apply_fusions(g);
  auto j = graph_to_json(g);
  Graph back = graph_from_json(j);
  CHECK(graph_to_json(back) == j);

  auto wrong = j;
  wrong["version"] = 99;
  CHECK_THROWS_WITH(graph_from_json(wrong), Catch::Contains("version 99"));
  auto broken = j;
  broken["tensors"][5]["shape"] = {1, 2, 3};
  CHECK_THROWS_AS(graph_from_json(broken), Error);
}

TEST_CASE("Config validation names the field", "[graph][config]") {
  auto base = config_to_json(small_config());
  auto bad = base;
  bad["hidden_size"] = 13;
  CHECK_THROWS_WITH(config_from_json(bad, "c.json"),
                    Catch::Contains("c.json") && Catch::Contains("not divisible by num_attention_heads"));
  bad = base;
  bad["num_hidden_layers"] = -2;
  CHECK_THROWS_WITH(config_from_json(bad, "c.json"), Catch::Contains("num_hidden_layers"));
  bad = base;
  bad["vocab_size"] = "many";
  CHECK_THROWS_WITH(config_from_json(bad, "c.json"), Catch::Contains("vocab_size"));
  bad = base;
  bad["some_unknown_key"] = 1;
  CHECK_NOTHROW(config_from_json(bad, "c.json"));
  CHECK_THROWS_WITH(build_bert(small_config(), run(1, 17)),
                    Catch::Contains("exceeds max_position_embeddings 16"));
}

// hwmodel's "this CPU" model (estimate.cpp cpu_node) against hand-computed times on a small
// graph and a small hand-written machine.json; the comparison with a measured profile
// (hwmodel/profile_compare.*) on a synthetic profile; the CLI's error paths. No timing.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "hwmodel/estimate.h"
#include "hwmodel/profile_compare.h"
#include "hwmodel/system.h"
#include "runtime/bert_builder.h"
#include "runtime/step_rules.h"  // gemm_b_packed, kept_x_casts, shared_attention_casts
#include "runtime/fusion.h"
#include "test_configs.h"
#include "base/error.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::hw;
using bertlab::testing::quote;
using bertlab::testing::run_bertlab;
using bertlab::testing::TempDir;

namespace {

// f32 peak 100 and bf16 peak 400 GFLOP/s; DRAM triad 10 GB/s, cache-resident triad 50 GB/s;
// 2 us per parallel region; three measured GEMMs. As `bertlab calibrate` writes it, by hand.
const char* kMachine = R"({
  "format": "bertlab-machine", "version": 1,
  "cpu": {"model": "hand-written cpu", "isa": "avx512_core_amx", "bf16": true, "logical_cpus": 2},
  "threads": 2, "date": "2026-01-01T00:00:00Z",
  "gemm_peak_gflops": {"f32": 100, "bf16": 400},
  "bandwidth_gbs": {"read": 12, "write": 8, "triad": 10, "triad_resident": 50},
  "bandwidth_resident_array_bytes": 4194304,
  "parallel_region_us": 2,
  "gemms": [
    {"name": "small", "precision": "f32", "batch": 1, "m": 16, "n": 32, "k": 64, "gflops": 20},
    {"name": "large", "precision": "f32", "batch": 1, "m": 1024, "n": 1024, "k": 1024, "gflops": 100},
    {"name": "small", "precision": "bf16", "batch": 1, "m": 16, "n": 32, "k": 64, "gflops": 80}
  ],
  "bandwidth_array_bytes": 268435456, "seconds_per_measurement": 1
})";

SystemDesc machine() { return system_from_json(nlohmann::json::parse(kMachine), "machine.json"); }

// x (16,64) -> fc (f32 linear, 32 outputs) -> add (y + y); x -> fc_bf16 (the same in bf16).
Graph small_graph() {
  Graph g;
  const int x = g.add_tensor("x", {16, 64}, DType::f32, Role::input);
  const int w = g.add_tensor("w", {32, 64}, DType::f32, Role::weight);
  const int b = g.add_tensor("b", {32}, DType::f32, Role::weight);
  const int y = g.apply(OpKind::linear, "enc.fc", {x, w, b});
  g.apply(OpKind::add, "enc.add", {y, y});
  g.apply(OpKind::linear, "enc.fc_bf16", {x, w, b}, {{"precision", "bf16"}});
  g.meta = {{"run", {{"batch", 1}, {"seq", 16}, {"mode", "infer"}, {"precision", "fp32"}}}};
  return g;
}

double seconds_of(const GraphEstimate& e, const std::string& name) {
  for (const auto& n : e.nodes)
    if (n.name == name) return n.seconds;
  FAIL("no node " << name);
  return 0;
}

}  // namespace

TEST_CASE("cpu model: hand-computed node times from a hand-written machine.json", "[hwmodel][hwmodel_cpu]") {
  const SystemDesc s = machine();
  REQUIRE(s.kind == SystemKind::cpu);
  CHECK(s.gemm_rates.size() == 3);
  CHECK(s.resident_gbps == 50);
  CHECK(s.parallel_region_seconds == Approx(2e-6));
  const Graph g = small_graph();
  const GraphEstimate e = estimate_graph(g, s, Arrangement::rwma);
  for (const auto& n : e.nodes) CHECK(n.model == "cpu-calibrated");

  // enc.fc: FLOPs 2*16*32*64 + 512 (bias) = 66048 at the measured (16,32,64) f32 rate of
  // 20 GFLOP/s = 3.3024 us; bytes 4096 + 8192 + 128 + 2048 = 14464 at the resident 50 GB/s
  // = 0.28928 us (below the compute time); one parallel region, 2 us. Inference: no packing.
  CHECK(seconds_of(e, "enc.fc") == Approx(2e-6 + 66048 / 20e9).epsilon(1e-12));
  // enc.add: 512 FLOPs (a floor of 5.12 ns at 100 GFLOP/s) vs 3 x 2048 bytes at 50 GB/s =
  // 0.12288 us, plus one region.
  CHECK(seconds_of(e, "enc.add") == Approx(2e-6 + 6144 / 50e9).epsilon(1e-12));
  // enc.fc_bf16: the bf16 (16,32,64) rate 80 GFLOP/s: 0.8256 us (memory 0.28928 us is
  // below it); the inference weight is prepacked in bf16, so only x (1024 elements) is
  // rounded into a bf16 copy: 1024 x (4 + 2) bytes at 50 GB/s = 0.12288 us; two regions
  // (the reorder and the matmul).
  CHECK(seconds_of(e, "enc.fc_bf16") == Approx(2 * 2e-6 + 66048 / 80e9 + 6144 / 50e9).epsilon(1e-12));
  CHECK(e.seconds() == Approx(2e-6 + 66048 / 20e9 + 2e-6 + 6144 / 50e9 + 4e-6 + 66048 / 80e9 + 6144 / 50e9));

  SECTION("nodes larger than the LLC stream at the DRAM triad") {
    SystemDesc small_llc = s;
    small_llc.llc = {4096, 1, 64, 40, false};  // the add's 6144 bytes no longer fit
    CHECK(seconds_of(estimate_graph(g, small_llc, Arrangement::rwma), "enc.add") ==
          Approx(2e-6 + 6144 / 10e9).epsilon(1e-12));
  }
  SECTION("training: backward nodes at the DRAM triad, linear weights packed before every GEMM") {
    Graph t = small_graph();
    const int y = *t.find_tensor("enc.fc.out");
    t.add_node(OpKind::add, "enc.add_grad", {y, y}, nlohmann::json::object(), Phase::backward);
    const GraphEstimate et = estimate_graph(t, s, Arrangement::rwma);
    // A backward node reads activations saved in the forward pass: the DRAM triad.
    CHECK(seconds_of(et, "enc.add_grad") == Approx(2e-6 + 6144 / 10e9).epsilon(1e-12));
    // f32: W (2048 elements) read and written packed, 8 bytes each at 50 GB/s, one more region.
    CHECK(seconds_of(et, "enc.fc") == Approx(2 * 2e-6 + 66048 / 20e9 + 2048 * 8 / 50e9).epsilon(1e-12));
    // bf16: x and W both rounded into bf16 copies, (1024 + 2048) x 6 bytes, three regions.
    CHECK(seconds_of(et, "enc.fc_bf16") == Approx(3 * 2e-6 + 66048 / 80e9 + 3072 * 6 / 50e9).epsilon(1e-12));
    // With accumulation the weight's packing (or cast) is spent once per step: its region and bytes.
    auto per_step = [&](const GraphEstimate& e, const std::string& name) {
      for (const auto& n : e.nodes)
        if (n.name == name) return n.per_step_seconds;
      FAIL("no node " << name);
      return 0.0;
    };
    CHECK(per_step(et, "enc.fc") == Approx(2e-6 + 2048 * 8 / 50e9).epsilon(1e-12));
    CHECK(per_step(et, "enc.fc_bf16") == Approx(2e-6 + 2048 * 6 / 50e9).epsilon(1e-12));
    CHECK(per_step(et, "enc.add_grad") == 0);
    CHECK(per_step(e, "enc.fc") == 0);  // inference: weights packed once at load time
    CHECK(per_step(e, "enc.fc_bf16") == 0);
  }
  SECTION("fp32 training: dX packs the weight (once per step under accumulation), dW packs x") {
    // The same backward GEMMs in f32 and in bf16: only f32 packs B (runtime::gemm_b_packed);
    // the f32 node pays B's reorder (4 B read + 4 B written per element, a backward node: the
    // DRAM triad, 10 GB/s) in one more parallel region.
    auto backward = [&](bool bf16) {
      Graph t = small_graph();
      const int x = *t.find_tensor("x"), w = *t.find_tensor("w");
      const int dy = t.add_tensor("enc.fc.out.grad", {16, 32}, DType::f32, Role::activation);
      const nlohmann::json attrs = bf16 ? nlohmann::json{{"precision", "bf16"}} : nlohmann::json::object();
      t.add_node(OpKind::linear_grad_input, "enc.fc.grad_input", {dy, w}, attrs, Phase::backward);
      t.add_node(OpKind::linear_grad_weight, "enc.fc.grad_weight", {dy, x}, attrs, Phase::backward);
      for (const auto& n : t.nodes())
        if (n.phase == Phase::backward) CHECK(gemm_b_packed(t, n) == !bf16);
      return estimate_graph(t, s, Arrangement::rwma);
    };
    const GraphEstimate f32 = backward(false);
    auto per_step = [&](const std::string& name) {
      for (const auto& n : f32.nodes)
        if (n.name == name) return n.per_step_seconds;
      FAIL("no node " << name);
      return 0.0;
    };
    CHECK(per_step("enc.fc.grad_input") == Approx(2e-6 + 2048 * 8 / 10e9).epsilon(1e-12));  // w: 32 x 64
    CHECK(per_step("enc.fc.grad_weight") == 0);  // x changes with every micro-batch
    // FLOPs at the nearest measured shape (20 GFLOP/s) dominate the bytes. dX: 65536 FLOPs, the
    // matmul and the packing of w (2048 elements). dW: 65536 + 512 (the bias gradient's column
    // sums), the matmul, the packing of x (1024 elements) and the bias pass over dy (2048 bytes).
    CHECK(seconds_of(f32, "enc.fc.grad_input") == Approx(2 * 2e-6 + 65536 / 20e9 + 2048 * 8 / 10e9).epsilon(1e-12));
    CHECK(seconds_of(f32, "enc.fc.grad_weight") ==
          Approx(3 * 2e-6 + 66048 / 20e9 + (1024 * 8 + 2048) / 10e9).epsilon(1e-12));
  }
  SECTION("bf16 training: a dW GEMM after its layer's dX GEMM reads the dX GEMM's copy of dy") {
    // The same dW node with and without the dX node before it: sharing removes dy's
    // conversion (16 x 32 elements, 4 + 2 bytes each; a backward node: the DRAM triad,
    // 10 GB/s) and the bias gradient's pass over dy (4 bytes each; the dX GEMM's cast summed
    // the columns), and their two parallel regions.
    auto dw_seconds = [&](bool dx_first) {
      Graph t = small_graph();
      const int x = *t.find_tensor("x"), w = *t.find_tensor("w");
      const int dy = t.add_tensor("enc.fc_bf16.out.grad", {16, 32}, DType::f32, Role::activation);
      const nlohmann::json bf16 = {{"precision", "bf16"}};
      if (dx_first) t.add_node(OpKind::linear_grad_input, "enc.fc_bf16.grad_input", {dy, w}, bf16, Phase::backward);
      t.add_node(OpKind::linear_grad_weight, "enc.fc_bf16.grad_weight", {dy, x}, bf16, Phase::backward);
      return seconds_of(estimate_graph(t, s, Arrangement::rwma), "enc.fc_bf16.grad_weight");
    };
    CHECK(dw_seconds(false) - dw_seconds(true) == Approx(2 * 2e-6 + 512 * (6 + 4) / 10e9).epsilon(1e-9));
  }
  SECTION("bf16 training: attention backward GEMMs read the casts their predecessors left") {
    // dV = P^T dctx right after dP = dctx V^T reads dP's copy of dctx (runtime::
    // shared_attention_casts): dctx's conversion (B x S x H elements, 4 + 2 bytes each; a
    // backward node: the DRAM triad, 10 GB/s) and its parallel region are gone. dctx is dV's B
    // operand (its A is P^T), so the saving also checks the operand mapping.
    const int64_t B = 2, S = 8, heads = 2, H = 8;
    auto dv_seconds = [&](bool dp_first) {
      Graph t;
      const int qkv = t.add_tensor("qkv", {B, S, 3 * H}, DType::f32, Role::activation);
      const int dctx = t.add_tensor("ctx.grad", {B, S, H}, DType::f32, Role::activation);
      const int probs = t.add_tensor("probs", {B, heads, S, S}, DType::f32, Role::activation);
      const nlohmann::json attrs = {{"precision", "bf16"}, {"heads", heads}};
      if (dp_first) t.add_node(OpKind::attn_context_grad_probs, "dp", {dctx, qkv}, attrs, Phase::backward);
      t.add_node(OpKind::attn_context_grad_v, "dv", {dctx, probs}, attrs, Phase::backward);
      CHECK(shared_attention_casts(t).back() == (dp_first ? 1 : 0));
      return seconds_of(estimate_graph(t, s, Arrangement::rwma), "dv");
    };
    CHECK(dv_seconds(false) - dv_seconds(true) == Approx(2e-6 + double(B * S * H) * 6 / 10e9).epsilon(1e-9));
  }
  SECTION("a dropout and the add it alone feeds are one pass, as the executor runs them") {
    Graph t;
    const int x = t.add_tensor("x", {16, 64}, DType::f32, Role::input);
    const int r = t.add_tensor("r", {16, 64}, DType::f32, Role::input);
    const int d = t.apply(OpKind::dropout, "enc.drop", {x}, {{"p", 0.1}, {"salt", 1}});
    t.apply(OpKind::add, "enc.residual", {d, r});
    REQUIRE(fused_steps(t) == std::vector<uint8_t>{2, 0});
    const GraphEstimate e = estimate_graph(t, s, Arrangement::rwma);
    // x and r read, the sum written (4096 bytes each), never the dropout's output; forward
    // bytes that fit the LLC: the resident 50 GB/s; one parallel region.
    CHECK(seconds_of(e, "enc.drop") == Approx(2e-6 + 3 * 4096 / 50e9).epsilon(1e-12));
    CHECK(seconds_of(e, "enc.residual") == 0);
    // A second reader of the dropout's output: two kernels, each priced on its own.
    t.apply(OpKind::add, "enc.other", {d, d});
    REQUIRE(fused_steps(t) == std::vector<uint8_t>{1, 1, 1});
    const GraphEstimate apart = estimate_graph(t, s, Arrangement::rwma);
    CHECK(seconds_of(apart, "enc.drop") == Approx(2e-6 + 2 * 4096 / 50e9).epsilon(1e-12));
    CHECK(seconds_of(apart, "enc.residual") == Approx(2e-6 + 3 * 4096 / 50e9).epsilon(1e-12));
  }
  SECTION("attention scores, softmax and context: one step, the probabilities through the cache") {
    // qkv (2,8,24), 2 heads of 4: scores 2 x 2 x 8 x 8 (1024 bytes f32), the context (2,8,8).
    Graph t;
    const int qkv = t.add_tensor("qkv", {2, 8, 24}, DType::f32, Role::input);
    const int bias = t.add_tensor("bias", {2, 8}, DType::f32, Role::input);
    const int sc = t.apply(OpKind::attn_scores, "enc.scores", {qkv, bias}, {{"heads", 2}, {"scale", 0.5}});
    const int pr = t.apply(OpKind::softmax, "enc.softmax", {sc});
    t.apply(OpKind::attn_context, "enc.context", {pr, qkv}, {{"heads", 2}});
    REQUIRE(fused_steps(t) == std::vector<uint8_t>{3, 0, 0});
    const GraphEstimate e = estimate_graph(t, s, Arrangement::rwma);
    // Products: Q K^T 2*2*2*8*8*4 = 2048 FLOPs plus scale and bias 2*256, P V 2048, both
    // nearest the measured "small" f32 GEMM (20 GFLOP/s): 230.4 ns. Memory: qkv 1536 + bias 64
    // read, context 512 written = 2112 bytes at the resident 50 GB/s (42.24 ns, under the
    // products). In cache: the 1024 bytes of scores written, softmax's three passes, the context
    // product's read: 5120 bytes at 50 GB/s = 102.4 ns. One parallel region.
    CHECK(seconds_of(e, "enc.scores") == Approx(2e-6 + 4608 / 20e9 + 5120 / 50e9).epsilon(1e-12));
    CHECK(seconds_of(e, "enc.softmax") == 0);
    CHECK(seconds_of(e, "enc.context") == 0);
    // The probabilities read by a second node: three steps, each priced on its own.
    t.apply(OpKind::add, "enc.other", {pr, pr});
    REQUIRE(fused_steps(t) == std::vector<uint8_t>{1, 1, 1, 1});
    CHECK(seconds_of(estimate_graph(t, s, Arrangement::rwma), "enc.context") > 0);
  }
  SECTION("GELU and dropout: their elements at the rates calibrate measured, when slower than their bytes") {
    // x (16,64) -> GELU forward, its backward, a dropout: 1024 elements each.
    Graph t;
    const int x = t.add_tensor("x", {16, 64}, DType::f32, Role::input);
    const int y = t.apply(OpKind::activation, "enc.gelu", {x}, {{"activation", "gelu"}});
    t.add_node(OpKind::activation_grad, "enc.gelu.grad", {y, x}, {{"activation", "gelu"}}, Phase::backward);
    t.apply(OpKind::dropout, "enc.drop", {x}, {{"p", 0.1}, {"salt", 1}});
    const GraphEstimate before = estimate_graph(t, s, Arrangement::rwma);  // no rates in kMachine
    // Forward GELU: 4096 + 4096 bytes at the resident 50 GB/s = 163.84 ns, one region.
    CHECK(seconds_of(before, "enc.gelu") == Approx(2e-6 + 8192 / 50e9).epsilon(1e-12));
    auto j = nlohmann::json::parse(kMachine);
    j["elementwise_gelem_per_s"] = {{"gelu", 0.004}, {"gelu_grad", 0.002}, {"dropout", 1000}};
    j["elementwise_elements"] = 1024;
    const SystemDesc rated = system_from_json(j, "machine.json");
    const GraphEstimate e = estimate_graph(t, rated, Arrangement::rwma);
    // 1024 elements at 4 M/s = 256 us (above the bytes); the backward at 2 M/s = 512 us (its
    // 12288 bytes at the DRAM triad, 1.2288 us, below); the dropout at 1e12/s = 1.024 ns, below
    // its bytes (8192 at 50 GB/s): the bytes decide.
    CHECK(seconds_of(e, "enc.gelu") == Approx(2e-6 + 1024 / 0.004e9).epsilon(1e-12));
    CHECK(seconds_of(e, "enc.gelu.grad") == Approx(2e-6 + 1024 / 0.002e9).epsilon(1e-12));
    CHECK(seconds_of(e, "enc.drop") == Approx(seconds_of(before, "enc.drop")).epsilon(1e-12));
    // A description carries them too, and refuses a negative one by name.
    auto desc = system_to_json(rated);
    CHECK(system_from_json(desc, "d.json").elementwise_gelem_per_s == rated.elementwise_gelem_per_s);
    desc["elementwise_gelem_per_s"]["gelu"] = -1;
    CHECK_THROWS_WITH(system_from_json(desc, "d.json"), Catch::Contains("elementwise_gelem_per_s.gelu"));
  }
  SECTION("a rated activation's rate comes from its row; a file without it prices it by bytes") {
    // SiLU (rated in ops/activation.h) forward and backward over 1024 elements; the machine
    // file of the section above, written before SiLU existed, has no rate for it.
    Graph t;
    const int x = t.add_tensor("x", {16, 64}, DType::f32, Role::input);
    const int y = t.apply(OpKind::activation, "enc.silu", {x}, {{"activation", "silu"}});
    t.add_node(OpKind::activation_grad, "enc.silu.grad", {y, x}, {{"activation", "silu"}}, Phase::backward);
    t.apply(OpKind::activation, "enc.relu", {x}, {{"activation", "relu"}});
    auto j = nlohmann::json::parse(kMachine);
    j["elementwise_gelem_per_s"] = {{"gelu", 0.004}, {"gelu_grad", 0.002}, {"dropout", 1000}};
    j["elementwise_elements"] = 1024;
    const GraphEstimate older = estimate_graph(t, system_from_json(j, "machine.json"), Arrangement::rwma);
    // Not calibrated: 4096 + 4096 bytes at the resident 50 GB/s, as with no rates at all.
    CHECK(seconds_of(older, "enc.silu") == Approx(2e-6 + 8192 / 50e9).epsilon(1e-12));
    CHECK(seconds_of(older, "enc.relu") == Approx(2e-6 + 8192 / 50e9).epsilon(1e-12));
    j["elementwise_gelem_per_s"]["silu"] = 0.008;
    j["elementwise_gelem_per_s"]["silu_grad"] = 0.001;
    const GraphEstimate e = estimate_graph(t, system_from_json(j, "machine.json"), Arrangement::rwma);
    CHECK(seconds_of(e, "enc.silu") == Approx(2e-6 + 1024 / 0.008e9).epsilon(1e-12));
    CHECK(seconds_of(e, "enc.silu.grad") == Approx(2e-6 + 1024 / 0.001e9).epsilon(1e-12));
    // relu's row is not rated: a rate under its name is not read.
    j["elementwise_gelem_per_s"]["relu"] = 0.001;
    CHECK(seconds_of(estimate_graph(t, system_from_json(j, "machine.json"), Arrangement::rwma), "enc.relu") ==
          Approx(seconds_of(older, "enc.relu")).epsilon(1e-12));
  }
  SECTION("a run of optimizer nodes: one step on its first node, one parallel region per pass") {
    // Parameters of the given shapes, their grad_norm, then an update node each, as
    // append_optimizer builds them (`first`, `count`: which of them to keep).
    auto optimizer_graph = [](OpKind kind, size_t first, size_t count) {
      const std::vector<Shape> shapes = {{32, 64}, {32}, {64}};
      Graph t;
      std::vector<int> p, gr;
      for (size_t i = first; i < first + count; ++i) {
        p.push_back(t.add_tensor("p" + std::to_string(i), shapes[i], DType::f32, Role::weight));
        gr.push_back(t.add_tensor("grad:p" + std::to_string(i), shapes[i], DType::f32, Role::gradient));
      }
      const int norm = t.node(t.add_node(OpKind::grad_norm, "optimizer.grad_norm", gr, {}, Phase::optimizer)).outputs[0];
      for (size_t i = 0; i < count; ++i) {
        const Shape& shape = t.tensor(p[i]).shape;
        const int m = t.add_tensor("m" + std::to_string(i), shape, DType::f32, Role::optimizer_state);
        const int v = t.add_tensor("v" + std::to_string(i), shape, DType::f32, Role::optimizer_state);
        Node n;
        n.name = "optimizer." + t.tensor(p[i]).name;
        n.kind = kind;
        n.inputs = {p[i], gr[i], m, v, norm};
        n.outputs = {p[i], m, v};
        n.attrs = {{"decay", true}, {"segments", 1}};
        n.phase = Phase::optimizer;
        t.append_node(std::move(n));
      }
      return t;
    };
    for (OpKind kind : {OpKind::adamw_update, OpKind::lamb_update}) {
      const Graph all = optimizer_graph(kind, 0, 3);
      REQUIRE(optimizer_runs(all) == std::vector<int64_t>{1, 3, 0, 0});
      // Each node priced alone (a run of one: its own pass and parallel region).
      double alone = 0;
      for (size_t i = 0; i < 3; ++i)
        alone += seconds_of(estimate_graph(optimizer_graph(kind, i, 1), s, Arrangement::rwma), "optimizer.p" + std::to_string(i));
      const GraphEstimate e = estimate_graph(all, s, Arrangement::rwma);
      // AdamW: one pass over all three tensors, so one parallel region (2 us) instead of three;
      // LAMB: two passes, two regions.
      const double regions = kind == OpKind::adamw_update ? 1 : 2;
      CHECK(seconds_of(e, "optimizer.p0") == Approx(alone - 3 * 2e-6 + regions * 2e-6).epsilon(1e-12));
      CHECK(seconds_of(e, "optimizer.p1") == 0);
      CHECK(seconds_of(e, "optimizer.p2") == 0);
    }
    // Another phase between two updates ends the run.
    Graph split = optimizer_graph(OpKind::adamw_update, 0, 3);
    const int x = split.add_tensor("x", {4}, DType::f32, Role::input);
    Node between;
    between.name = "between";
    between.kind = OpKind::add;
    between.inputs = {x, x};
    between.outputs = {split.add_tensor("between.out", {4}, DType::f32, Role::activation)};
    between.phase = Phase::backward;
    split.append_node(std::move(between));
    Node again = split.node(3);  // p2's update once more: only the runs matter here
    again.name = "optimizer.again";
    split.append_node(std::move(again));
    CHECK(optimizer_runs(split) == std::vector<int64_t>{1, 3, 0, 0, 1, 1});
  }
  SECTION("bf16 inference: a linear layer fed only by another reads its bf16 output without a conversion") {
    // fc_bf16's output (16,32) into a second bf16 linear layer (8 outputs): the second node is
    // one parallel region + its matmul, no rounding of x; fed by the f32 fc it rounds x too.
    auto second_seconds = [&](const char* producer) {
      Graph t = small_graph();
      const int in = *t.find_tensor(fmt::format("{}.out", producer));
      const int w2 = t.add_tensor("w2", {8, 32}, DType::f32, Role::weight);
      const int b2 = t.add_tensor("b2", {8}, DType::f32, Role::weight);
      t.apply(OpKind::linear, "enc.fc2_bf16", {in, w2, b2}, {{"precision", "bf16"}});
      return seconds_of(estimate_graph(t, s, Arrangement::rwma), "enc.fc2_bf16");
    };
    // enc.fc's output is also read by enc.add: no hand-over. x: 16 x 32 elements, 6 bytes each;
    // both are forward nodes whose bytes fit the LLC: the resident 50 GB/s.
    CHECK(second_seconds("enc.fc") - second_seconds("enc.fc_bf16") == Approx(2e-6 + 512 * 6 / 50e9).epsilon(1e-9));
  }
  SECTION("row ops re-read their inputs once per extra pass") {
    Graph r;
    const int x = r.add_tensor("x", {16, 64}, DType::f32, Role::input);
    r.apply(OpKind::softmax, "sm", {x});
    // 4096 bytes in + 4096 out, and two more passes over x (max, sum, output): 16384 bytes
    // at the resident 50 GB/s; FLOPs (a few per element) stay far below it at 100 GFLOP/s.
    CHECK(estimate_graph(r, s, Arrangement::rwma).seconds() == Approx(2e-6 + 16384 / 50e9).epsilon(1e-12));
    // Backward: the first pass from DRAM (dy, y and dx: 12288 bytes at 10 GB/s), the second
    // pass over dy and y from cache (8192 bytes at 50 GB/s).
    const int y = *r.find_tensor("sm.out");
    r.add_node(OpKind::softmax_grad, "sm.grad", {x, y}, nlohmann::json::object(), Phase::backward);
    CHECK(seconds_of(estimate_graph(r, s, Arrangement::rwma), "sm.grad") ==
          Approx(2e-6 + 12288 / 10e9 + 8192 / 50e9).epsilon(1e-12));
  }
  SECTION("the nearest measured shape gives the rate") {
    Graph big;
    const int x = big.add_tensor("x", {1000, 1000}, DType::f32, Role::input);
    const int w = big.add_tensor("w", {1000, 1000}, DType::f32, Role::weight);
    const int b = big.add_tensor("b", {1000}, DType::f32, Role::weight);
    big.apply(OpKind::linear, "fc", {x, w, b});
    // (1000,1000,1000) is nearest to the measured (1024,1024,1024) at 100 GFLOP/s: 2.001e9
    // FLOPs = 20.01 ms; 12.004 MB over the DRAM triad (larger than the 1 MB LLC) = 1.2 ms.
    CHECK(estimate_graph(big, s, Arrangement::rwma).seconds() == Approx(2e-6 + 2.001e9 / 100e9).epsilon(1e-12));
  }
  SECTION("plain roofline model (before calibrated rates)") {
    SystemDesc r = s;
    r.cpu_model = CpuModel::roofline;
    const GraphEstimate er = estimate_graph(g, r, Arrangement::rwma);
    // max(66048 / 100 GFLOP/s, 14464 B / 10 GB/s) = 1.4464 us; f32 peak for the bf16 node too.
    CHECK(seconds_of(er, "enc.fc") == Approx(14464 / 10e9));
    CHECK(seconds_of(er, "enc.fc_bf16") == Approx(14464 / 10e9));
    CHECK(seconds_of(er, "enc.add") == Approx(6144 / 10e9));
  }
}

TEST_CASE("cpu model: older machine.json files and missing bf16 peaks", "[hwmodel][hwmodel_cpu]") {
  auto j = nlohmann::json::parse(kMachine);
  // Written before the resident triad and the parallel-region cost were measured.
  j.erase("parallel_region_us");
  j.erase("bandwidth_resident_array_bytes");
  j["bandwidth_gbs"].erase("triad_resident");
  const SystemDesc old = system_from_json(j, "old-machine.json");
  CHECK(old.resident_gbps == 0);
  CHECK(old.parallel_region_seconds == 0);
  const Graph g = small_graph();
  const GraphEstimate e = estimate_graph(g, old, Arrangement::rwma);
  CHECK(seconds_of(e, "enc.add") == Approx(6144 / 10e9).epsilon(1e-12));
  CHECK(seconds_of(e, "enc.fc") == Approx(66048 / 20e9).epsilon(1e-12));
  // Without any measured shapes: the peak of the node's precision, 66048 / 400 GFLOP/s =
  // 0.165 us, is below the memory floor 14464 B / 10 GB/s = 1.4464 us; plus x's bf16 copy.
  j["gemms"] = nlohmann::json::array();
  const SystemDesc peaks_only = system_from_json(j, "peaks.json");
  CHECK(seconds_of(estimate_graph(g, peaks_only, Arrangement::rwma), "enc.fc_bf16") ==
        Approx(14464 / 10e9 + 6144 / 10e9).epsilon(1e-12));
  // A bf16 GEMM on a CPU calibrated without bf16: the node and the field are named.
  j["gemm_peak_gflops"]["bf16"] = nullptr;
  j["cpu"]["bf16"] = false;
  CHECK_THROWS_WITH(estimate_graph(g, system_from_json(j, "nobf16.json"), Arrangement::rwma),
                    Catch::Contains("enc.fc_bf16") && Catch::Contains("gemm_peak_gflops.bf16"));
}

TEST_CASE("compare with a profile: per-category, step and node arithmetic", "[hwmodel][hwmodel_cpu]") {
  const SystemDesc s = machine();
  const Graph g = small_graph();
  const GraphEstimate e = estimate_graph(g, s, Arrangement::rwma);
  const double fc = seconds_of(e, "enc.fc"), add = seconds_of(e, "enc.add"), fcb = seconds_of(e, "enc.fc_bf16");
  nlohmann::json p = {{"format", "bertlab-profile"},
                      {"version", 1},
                      {"run", {{"batch", 1}, {"seq", 16}, {"mode", "infer"}, {"precision", "fp32"}}},
                      {"step_seconds", 100e-6},
                      {"step_stats", {{"accum", 1}}},
                      {"nodes",
                       {{{"name", "enc.fc_bf16"}, {"seconds", 10e-6}},
                        {{"name", "enc.fc"}, {"seconds", 40e-6}},
                        {{"name", "enc.add"}, {"seconds", 30e-6}}}}};
  ProfileComparison c = compare_with_profile(g, e, p, "p.json");
  const auto& lin = c.categories[static_cast<size_t>(ProfileCategory::gemm_linear)];
  CHECK(lin.label == std::string("projection/FFN GEMMs"));
  CHECK(lin.nodes == 2);
  CHECK(lin.measured == Approx(50e-6));
  CHECK(lin.predicted == Approx(fc + fcb));
  const auto& adds = c.categories[static_cast<size_t>(ProfileCategory::add)];
  CHECK(adds.measured == Approx(30e-6));
  CHECK(adds.predicted == Approx(add));
  // Step time outside every node: 100 - 80 us; nothing predicted for it.
  const auto& un = c.categories[static_cast<size_t>(ProfileCategory::unattributed)];
  CHECK(un.measured == Approx(20e-6));
  CHECK(un.predicted == 0);
  CHECK(c.measured_step == Approx(100e-6));
  CHECK(c.predicted_step == Approx(fc + add + fcb));
  // Worst first by |predicted - measured|: fc (40 us measured, ~5.3 predicted), then add.
  const auto worst = c.worst(2);
  REQUIRE(worst.size() == 2);
  CHECK(c.nodes[worst[0]].name == "enc.fc");
  CHECK(c.nodes[worst[1]].name == "enc.add");

  SECTION("accum: forward and backward nodes ran once per micro-batch") {
    p["step_stats"]["accum"] = 3;
    c = compare_with_profile(g, e, p, "p.json");
    CHECK(c.accum == 3);
    CHECK(c.predicted_step == Approx(3 * (fc + add + fcb)));
  }
  SECTION("accum in training: each weight's packing (or cast) counted once per step") {
    Graph t = small_graph();
    const int y = *t.find_tensor("enc.fc.out");
    t.add_node(OpKind::add, "enc.add_grad", {y, y}, nlohmann::json::object(), Phase::backward);
    const GraphEstimate et = estimate_graph(t, s, Arrangement::rwma);
    p["nodes"].push_back({{"name", "enc.add_grad"}, {"seconds", 5e-6}});
    p["step_stats"]["accum"] = 3;
    c = compare_with_profile(t, et, p, "p.json");
    double sum = 0;
    for (const auto& n : et.nodes) sum += n.seconds;
    // The packing of W: f32 2048 x 8 bytes, bf16 2048 x 6 bytes, at 50 GB/s, one region each.
    const double prep = 2 * 2e-6 + 2048 * 8 / 50e9 + 2048 * 6 / 50e9;
    CHECK(c.predicted_step == Approx(3 * sum - 2 * prep).epsilon(1e-9));
  }
  SECTION("another graph: the node names on each side are named") {
    p["nodes"][0]["name"] = "enc.other";
    CHECK_THROWS_WITH(compare_with_profile(g, e, p, "p.json"),
                      Catch::Contains("p.json") && Catch::Contains("another graph") &&
                          Catch::Contains("enc.fc_bf16") && Catch::Contains("enc.other"));
  }
  SECTION("another run of the same graph") {
    p["run"]["precision"] = "bf16";
    CHECK_THROWS_WITH(compare_with_profile(g, e, p, "p.json"), Catch::Contains("run.precision"));
  }
  SECTION("not a profile") {
    p["format"] = "bertlab-machine";
    CHECK_THROWS_WITH(compare_with_profile(g, e, p, "p.json"), Catch::Contains("not a bertlab profile"));
    p["format"] = "bertlab-profile";
    p["nodes"][1].erase("seconds");
    CHECK_THROWS_WITH(compare_with_profile(g, e, p, "p.json"), Catch::Contains("nodes[1].seconds"));
  }
}

TEST_CASE("bertlab estimate --compare-profile: output and error paths", "[hwmodel][hwmodel_cpu]") {
  TempDir dir("hwcpu");
  const std::string src = BERTLAB_SOURCE_DIR;
  std::ofstream(dir / "machine.json") << kMachine;
  const std::string graph_args =
      fmt::format("--config {} --batch 1 --seq 8", quote(bertlab::testing::source_dir() / "configs/bert-tiny.json"));
  auto r = run_bertlab(fmt::format("graph {} -o {}", graph_args, quote(dir / "g.json")));
  REQUIRE(r.exit_code == 0);
  const auto graph = nlohmann::json::parse(std::ifstream(dir / "g.json"));
  // A synthetic profile of that graph: 10 us per node, a 1 ms step.
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : graph.at("nodes")) nodes.push_back({{"name", n.at("name")}, {"seconds", 10e-6}});
  nlohmann::json prof = {{"format", "bertlab-profile"}, {"version", 1},   {"run", graph.at("meta").at("run")},
                         {"step_seconds", 1e-3},        {"nodes", nodes}};
  std::ofstream(dir / "p.json") << prof.dump();
  const std::string est = fmt::format("estimate {} --system {} ", graph_args, quote(dir / "machine.json"));

  r = run_bertlab(est + fmt::format("--compare-profile {} --csv {} --json {}", quote(dir / "p.json"),
                                    quote(dir / "e.csv"), quote(dir / "e.json")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("projection/FFN GEMMs") && Catch::Contains("whole step") &&
                           Catch::Contains("worst-predicted"));
  std::ifstream csv(dir / "e.csv");
  std::string header;
  std::getline(csv, header);
  CHECK_THAT(header, Catch::EndsWith(",measured_seconds"));
  const auto ej = nlohmann::json::parse(std::ifstream(dir / "e.json"));
  CHECK(ej.at(0).at("nodes").at(0).at("measured_seconds").get<double>() == Approx(10e-6));

  // Not a profile: a machine.json, and not JSON at all.
  r = run_bertlab(est + "--compare-profile " + quote(dir / "machine.json"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("machine.json") && Catch::Contains("not a bertlab profile"));
  std::ofstream(dir / "junk.json") << "not json";
  r = run_bertlab(est + "--compare-profile " + quote(dir / "junk.json"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("junk.json"));
  // A sweep.
  std::ofstream(dir / "sweep.json") << R"({"format": "bertlab-profile-sweep", "version": 1, "entries": []})";
  r = run_bertlab(est + "--compare-profile " + quote(dir / "sweep.json"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("sweep"));
  // Another graph: one node renamed, and another batch size.
  prof["nodes"][2]["name"] = "no.such.node";
  std::ofstream(dir / "other.json") << prof.dump();
  r = run_bertlab(est + "--compare-profile " + quote(dir / "other.json"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("another graph") && Catch::Contains("no.such.node") &&
                           Catch::Contains(graph.at("nodes").at(2).at("name").get<std::string>()));
  r = run_bertlab(fmt::format("estimate --config {} --batch 2 --seq 8 --system {} --compare-profile {}",
                              quote(bertlab::testing::source_dir() / "configs/bert-tiny.json"),
                              quote(dir / "machine.json"), quote(dir / "p.json")));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("run.batch"));
  // An accelerator description.
  r = run_bertlab(fmt::format("estimate {} --system {} --compare-profile {}", graph_args,
                              quote(bertlab::testing::source_dir() / "configs/systems/paper-ticsat.json"),
                              quote(dir / "p.json")));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("cpu description"));
  // --precision with a graph file is refused (the file already says).
  r = run_bertlab(fmt::format("estimate --graph {} --precision bf16 --system {}", quote(dir / "g.json"),
                              quote(dir / "machine.json")));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Contains("--precision"));
}

TEST_CASE("cpu model: a kept bf16 x costs its dW GEMM no conversion, and the recomputation nothing",
          "[hwmodel][hwmodel_cpu]") {
  const SystemDesc s = machine();
  RunSpec r;
  r.batch = 2, r.seq = 16, r.mode = RunMode::train, r.precision = Precision::bf16, r.dropout = false;
  auto graph = [&](bool keep) {
    Graph g = build_bert(bertlab::testing::bert_config(200, 64, 2, 4, 128, 64), r);
    apply_fusions(g);
    if (!keep) bertlab::testing::keep_no_x_casts(g);
    return g;
  };
  const Graph kept_graph = graph(true);
  const auto kept = kept_x_casts(kept_graph);
  const GraphEstimate with = estimate_graph(kept_graph, s, Arrangement::rwma);
  const GraphEstimate without = estimate_graph(graph(false), s, Arrangement::rwma);
  int checked = 0;
  for (const auto& n : kept_graph.nodes()) {
    const KeptX role = kept[size_t(n.id)].role;
    if (role == KeptX::none || role == KeptX::keeps) continue;
    if (role == KeptX::skipped) {
      CHECK(seconds_of(with, n.name) == 0);
      CHECK(seconds_of(without, n.name) > 0);
      continue;
    }
    // x (k x n of the dW product) is not rounded: 4 + 2 bytes per element at the DRAM triad
    // (10 GB/s) and one parallel region (2 us) less.
    const auto gm = *node_gemm(kept_graph, n);
    INFO(n.name);
    CHECK(seconds_of(without, n.name) - seconds_of(with, n.name) ==
          Approx(2e-6 + double(gm.k * gm.n) * 6 / 10e9).epsilon(1e-9));
    ++checked;
  }
  CHECK(checked >= 8);  // four linear layers in each of the two encoder layers
}

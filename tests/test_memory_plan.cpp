// The memory planner on real BERT graphs: no two tensors that are alive at the same time share
// a byte, offsets are aligned, reuse never costs memory; and the executor, which runs on that
// plan, gives identical outputs when it runs twice (graph inputs survive between runs).
#include <catch2/catch.hpp>
#include <omp.h>

#include <set>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/matmul.h"
#include "runtime/bert_builder.h"
#include "runtime/executor.h"
#include "runtime/fusion.h"
#include "runtime/memory_plan.h"
#include "runtime/model.h"
#include "runtime/op_rules.h"
#include "runtime/step_rules.h"
#include "test_configs.h"

using namespace bertlab;

namespace {

BertConfig small_config() { return testing::bert_config(97, 36, 2, 3, 52, 24); }

Graph small_graph(int64_t batch, int64_t seq, bool fused) {
  RunSpec run;
  run.batch = batch;
  run.seq = seq;
  Graph g = build_bert(small_config(), run);
  if (fused) apply_fusions(g);
  return g;
}

// Lifetimes recomputed from the graph, independently of the planner: [first, last] node ids,
// inclusive, so a node's inputs and outputs always overlap (kernels may not alias them).
// Graph inputs live through the whole run (written before it, reused by the next) and graph
// outputs until its end (read after it).
struct Lifetime {
  int first = 0, last = -1;
};

// With `runs` (runtime::fused_steps), every node of a run counts as the whole run: its
// inputs and outputs live from the run's first node to its last.
std::vector<Lifetime> lifetimes(const Graph& g, const std::vector<uint8_t>& runs = {}) {
  const int end = static_cast<int>(g.nodes().size());
  std::vector<int> from(end), to(end);
  for (int i = 0; i < end; ++i) from[i] = to[i] = i;
  for (int i = 0; i < end && !runs.empty(); ++i)
    for (int j = i + 1; j < i + runs[i]; ++j) from[j] = i, to[i] = to[j] = i + runs[i] - 1;
  std::vector<Lifetime> life(g.tensors().size(), Lifetime{end + 1, -1});
  for (const auto& t : g.tensors())
    if (t.role == Role::input) life[t.id] = {-1, end};
  for (const auto& n : g.nodes()) {
    for (int t : n.outputs)
      life[t].first = std::min(life[t].first, from[n.id]), life[t].last = std::max(life[t].last, to[n.id]);
    for (int t : n.inputs) life[t].last = std::max(life[t].last, to[n.id]);
  }
  for (const auto& [name, t] : g.outputs()) life[t].last = end;
  return life;
}

void check_plan(const Graph& g, const MemoryPlan& plan, int64_t alignment, const std::string& label,
                const std::vector<uint8_t>& runs = {}) {
  const auto life = lifetimes(g, runs);
  // A run's intermediates (written and read only inside it) have no buffer.
  std::vector<char> intermediate(g.tensors().size(), 0);
  for (size_t i = 0; i < runs.size(); ++i)
    for (size_t j = i; j + 1 < i + runs[i]; ++j) intermediate[static_cast<size_t>(g.node(static_cast<int>(j)).outputs.at(0))] = 1;
  REQUIRE(plan.offset.size() == g.tensors().size());
  std::vector<int> placed;
  for (const auto& t : g.tensors()) {
    const bool arena_role = t.role == Role::input || t.role == Role::activation;
    if (!arena_role) {
      CHECK(plan.offset[t.id] == -1);  // weights live in the parameter store
      continue;
    }
    INFO(label << ": tensor " << t.name);
    if (intermediate[static_cast<size_t>(t.id)]) {
      CHECK(plan.offset[t.id] == -1);
      continue;
    }
    REQUIRE(plan.offset[t.id] >= 0);
    CHECK(plan.offset[t.id] % alignment == 0);
    CHECK(plan.offset[t.id] + t.bytes() <= plan.arena_bytes);
    placed.push_back(t.id);
  }
  // The one sanctioned sharing: an in-place element-wise node writing over its first input,
  // which no later node reads (an exact alias: same offset, same size).
  std::set<std::pair<int, int>> in_place;
  for (const auto& n : g.nodes())
    if (runs_in_place(n.kind) && life[n.inputs[0]].last == n.id &&
        plan.offset[n.inputs[0]] == plan.offset[n.outputs[0]])
      in_place.insert(std::minmax(n.inputs[0], n.outputs[0]));
  int64_t overlapping_pairs = 0, shared_pairs = 0;
  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const auto &a = g.tensor(placed[i]), &b = g.tensor(placed[j]);
      const bool alive_together =
          life[a.id].first <= life[b.id].last && life[b.id].first <= life[a.id].last;
      const int64_t a0 = plan.offset[a.id], a1 = a0 + a.bytes();
      const int64_t b0 = plan.offset[b.id], b1 = b0 + b.bytes();
      const bool share_bytes = a0 < b1 && b0 < a1;
      overlapping_pairs += alive_together;
      shared_pairs += share_bytes;
      if (alive_together && share_bytes && !in_place.count(std::minmax(a.id, b.id)))
        FAIL_CHECK(label << ": " << a.name << " [" << a0 << ", " << a1 << ") and " << b.name << " ["
                         << b0 << ", " << b1 << ") are alive together (nodes " << life[a.id].first
                         << ".." << life[a.id].last << " and " << life[b.id].first << ".."
                         << life[b.id].last << ") but share bytes");
    }
  CHECK(plan.arena_bytes <= plan.unshared_bytes);
  CHECK(shared_pairs > 0);  // a BERT graph has plenty of dead activations to reuse
  fmt::print(
      "  {:<34} {:>3} tensors, {:>5} pairs alive together, {:>4} pairs sharing bytes, "
      "arena {} B of {} B unshared\n",
      label, placed.size(), overlapping_pairs, shared_pairs, plan.arena_bytes, plan.unshared_bytes);
}

}  // namespace

TEST_CASE("Memory plan: tensors alive together never share bytes", "[runtime]") {
  for (bool fused : {true, false})
    for (auto [batch, seq] : {std::pair<int64_t, int64_t>{2, 13}, {1, 1}})
      for (int64_t alignment : {int64_t{64}, int64_t{256}}) {
        Graph g = small_graph(batch, seq, fused);
        MemoryPlan plan = plan_memory(g, alignment);
        check_plan(
            g, plan, alignment,
            fmt::format("{} B{} S{} align {}", fused ? "fused" : "unfused", batch, seq, alignment));
      }
}

// The executor's attention runs (scores, softmax, context as one step, ops::FusedAttention):
// a block's context is written while other blocks still read qkv and the mask, so the plan
// keeps those live through the run. Before it did, the last layer's context was planned over
// the mask bias, whose last reader is that layer's scores node.
TEST_CASE("Memory plan: a fused run's inputs live through the run, its intermediates have no buffer",
          "[runtime]") {
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{2, 13}, {5, 9}}) {
    Graph g = small_graph(batch, seq, true);
    const auto runs = fused_steps(g);
    REQUIRE(std::count(runs.begin(), runs.end(), kFusedAttention) == small_config().num_hidden_layers);
    check_plan(g, plan_memory(g, 64, {}, runs), 64, fmt::format("attention runs B{} S{}", batch, seq), runs);
  }
}

TEST_CASE("Memory plan: graph inputs and outputs live through the whole run", "[runtime]") {
  Graph g = small_graph(2, 13, true);
  MemoryPlan plan = plan_memory(g);
  auto producer = [&](int tensor) {
    for (const auto& n : g.nodes())
      for (int t : n.outputs)
        if (t == tensor) return n.id;
    return -1;  // a graph input
  };
  auto overlaps = [&](int a, int b) {
    const int64_t a0 = plan.offset[a], a1 = a0 + g.tensor(a).bytes();
    const int64_t b0 = plan.offset[b], b1 = b0 + g.tensor(b).bytes();
    return a0 < b1 && b0 < a1;
  };
  // Inputs are written before run() and read again by the next run: nothing may overlap them.
  for (const char* name : {"input_ids", "token_type_ids", "attention_mask"}) {
    const int in = g.tensor_id(name);
    for (const auto& t : g.tensors()) {
      if (t.id == in || plan.offset[t.id] < 0) continue;
      INFO(name << " vs " << t.name);
      CHECK_FALSE(overlaps(in, t.id));
    }
  }
  // An output is read after run(): nothing written after it may overlap it.
  for (const auto& [name, out] : g.outputs()) {
    const int written = producer(out);
    for (const auto& t : g.tensors()) {
      if (t.id == out || plan.offset[t.id] < 0 || producer(t.id) <= written) continue;
      INFO(name << " vs " << t.name << ", written later");
      CHECK_FALSE(overlaps(out, t.id));
    }
  }
}

TEST_CASE("Executor: running twice gives identical outputs", "[runtime]") {
  const BertConfig c = small_config();
  Model m = init_model(c, Heads::pretraining, 7);
  // Non-zero biases and layernorm parameters, so every term of every op matters.
  for (const auto& p : m.params.params()) {
    float* d = m.params.data(p.name);
    if (p.shape.size() == 1)
      for (int64_t i = 0; i < p.numel(); ++i) d[i] += 0.01f * float((i * 13) % 7 - 3);
  }
  BertInputs in;
  in.batch = 2;
  in.seq = 13;
  for (int64_t i = 0; i < in.batch * in.seq; ++i) {
    in.input_ids.push_back(static_cast<int32_t>((i * 31 + 5) % c.vocab_size));
    in.token_type_ids.push_back(i % in.seq >= 7);
    in.attention_mask.push_back(i < in.seq + 9);  // second sequence padded after 9 tokens
  }
  validate_inputs(in, c, "test batch");
  RunSpec run;
  run.batch = in.batch;
  run.seq = in.seq;
  Graph g = build_bert(c, run);
  apply_fusions(g);
  Executor ex(std::move(g), m.params);
  set_inputs(ex, in);

  const char* names[] = {"last_hidden_state", "pooler_output", "mlm_logits", "nsp_logits"};
  auto snapshot = [&] {
    std::vector<std::vector<float>> out;
    for (const char* name : names) {
      const float* p = ex.output(name);
      out.emplace_back(p, p + numel(ex.output_shape(name)));
    }
    return out;
  };
  ex.run();
  const auto first = snapshot();
  ex.run();  // no set_inputs in between: the input buffers must not have been overwritten
  const auto second = snapshot();
  for (size_t i = 0; i < first.size(); ++i) {
    INFO(names[i]);
    CHECK(first[i] == second[i]);  // bit-identical: same kernels, same data
  }
  CHECK(std::equal(in.input_ids.begin(), in.input_ids.end(), ex.input("input_ids")));
  CHECK(std::equal(in.attention_mask.begin(), in.attention_mask.end(), ex.input("attention_mask")));
  CHECK(std::equal(in.token_type_ids.begin(), in.token_type_ids.end(), ex.input("token_type_ids")));

  // The padding mask takes effect: changing a padded token leaves the first sequence and every
  // unpadded position of the second unchanged.
  in.input_ids[in.seq + 11] = 1;
  set_inputs(ex, in);
  ex.run();
  const auto third = snapshot();
  const int64_t H = c.hidden_size;
  CHECK(std::equal(first[0].begin(), first[0].begin() + (in.seq + 9) * H, third[0].begin()));
}

// The executor runs each layer's attention scores, softmax and context as one step (kept apart
// here by making every layer's probabilities a graph output), with padded and unpadded
// sequences, one sequence (blocks of heads) and an odd number of sequences.
//
// How closely the two agree depends on oneDNN's products, not on bertlab. Its brgemm kernels
// give each product of a block of heads the bits of the whole batch's product: there the
// outputs must be bit-identical. Its gemm:jit (f32 below AVX-512, and tiny heads on any ISA)
// sums a dot product in an order that depends on the batch shape: measured on these shapes
// capped at AVX2, 22 of 1215 scores differ between one head and the whole batch. There the
// first layer's context, which both compute from the same qkv, must agree within the bound of
// two summation orders (derived below), and the final outputs within a relative 1e-4 of their
// largest value (a gross-error check of the later layers, whose inputs already differ).
TEST_CASE("Executor: the fused attention step gives the outputs of the three kernels", "[runtime]") {
  const BertConfig c = small_config();
  const Model m = init_model(c, Heads::pretraining, 11);
  const int64_t heads = c.num_attention_heads, d = c.hidden_size / heads, H = c.hidden_size;
  for (int64_t batch : {1, 2, 5}) {
    BertInputs in;
    in.batch = batch;
    in.seq = 9;
    for (int64_t i = 0; i < in.batch * in.seq; ++i) {
      in.input_ids.push_back(static_cast<int32_t>((i * 37 + 3) % c.vocab_size));
      in.token_type_ids.push_back(0);
      in.attention_mask.push_back((i / in.seq) % 2 == 0 || i % in.seq < 4);  // odd sequences padded after 4
    }
    RunSpec run;
    run.batch = in.batch;
    run.seq = in.seq;
    Graph fused = build_bert(c, run);
    apply_fusions(fused);
    // The first layer's qkv and context, outputs of both graphs (the fused step still forms).
    for (const char* t : {"encoder.0.attention.scores", "encoder.0.attention.context"}) {
      const auto it = std::find_if(fused.nodes().begin(), fused.nodes().end(), [&](const Node& n) { return n.name == t; });
      REQUIRE(it != fused.nodes().end());
      if (it->kind == OpKind::attn_scores) fused.mark_output(it->inputs.at(0), "qkv0");
      else fused.mark_output(it->outputs.at(0), "context0");
    }
    Graph apart = fused;
    for (const auto& n : apart.nodes())
      if (n.kind == OpKind::softmax) apart.mark_output(n.outputs.at(0), n.name);
    // The executor's threads: a batch of fewer sequences keeps the kernels apart (fused_steps).
    const int threads = omp_get_max_threads();
    const auto runs_one = fused_steps(fused, threads), runs_three = fused_steps(apart, threads);
    REQUIRE(std::count(runs_one.begin(), runs_one.end(), kFusedAttention) == (batch >= threads ? c.num_hidden_layers : 0));
    REQUIRE(std::count(runs_three.begin(), runs_three.end(), kFusedAttention) == 0);
    Executor one(std::move(fused), m.params), three(std::move(apart), m.params);
    set_inputs(one, in);
    set_inputs(three, in);
    one.run();
    three.run();
    const float scale = 1.f / std::sqrt(float(d));
    const bool brgemm = ops::AttentionScores::impls(batch, in.seq, heads, d, scale, false, false)[0].rfind("brg", 0) == 0 &&
                        ops::AttentionContext::impl(batch, in.seq, heads, d, false, false, false).rfind("brg", 0) == 0;
    INFO("oneDNN's products: " << (brgemm ? "brgemm (bit-identical)" : "not brgemm (within rounding)"));
    if (brgemm || batch < threads) {
      for (const char* name : {"last_hidden_state", "mlm_logits", "nsp_logits", "context0"}) {
        INFO("batch " << batch << ", " << name);
        const int64_t n = numel(one.output_shape(name));
        CHECK(std::equal(one.output(name), one.output(name) + n, three.output(name)));
      }
      continue;
    }
    // Two orders of a sum of K products each differ by at most 2 gamma_K sum |a_i b_i|, with
    // gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability, 3.1). A score
    // s_ij = scale q_i.k_j is off by E_ij <= 2 gamma_d scale sum_k |q_ik k_jk| (+ u |s_ij| for the
    // scale); softmax turns that into |dp_ij| <= p_ij (E_ij + max_l E_il) <= 2 p_ij E_i; the
    // context c = sum_j p_ij v_j then differs by at most (2 E_i + 2 gamma_S) sum_j p_ij |v_j|.
    // First order; a factor 2 covers the second-order terms.
    auto gamma = [](double k) { return k * 0x1p-24 / (1 - k * 0x1p-24); };
    const float* qkv = three.output("qkv0");
    const float* probs = three.output("encoder.0.attention.softmax");
    const float *ctx_one = one.output("context0"), *ctx_three = three.output("context0");
    const int64_t S = in.seq, row = 3 * H;
    int64_t outside = 0, differing = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < S; ++i) {
          const float* q = qkv + (b * S + i) * row + h * d;
          double e_max = 0;
          for (int64_t j = 0; j < S; ++j) {
            const float* k = qkv + (b * S + j) * row + H + h * d;
            double abs_dot = 0, dot = 0;
            for (int64_t t = 0; t < d; ++t) abs_dot += std::abs(double(q[t]) * k[t]), dot += double(q[t]) * k[t];
            e_max = std::max(e_max, 2 * gamma(double(d)) * scale * abs_dot + 0x1p-24 * std::abs(scale * dot));
          }
          const float* p = probs + ((b * heads + h) * S + i) * S;
          for (int64_t t = 0; t < d; ++t) {
            double pv = 0;
            for (int64_t j = 0; j < S; ++j) pv += p[j] * std::abs(double(qkv[(b * S + j) * row + 2 * H + h * d + t]));
            const double bound = 2 * (2 * e_max + 2 * gamma(double(S))) * pv;
            const int64_t at = (b * S + i) * H + h * d + t;
            const double diff = std::abs(double(ctx_one[at]) - ctx_three[at]);
            differing += diff > 0;
            outside += diff > bound;
          }
        }
    INFO("batch " << batch << ": " << differing << " of " << batch * S * H << " first-layer context values differ");
    CHECK(outside == 0);
    for (const char* name : {"last_hidden_state", "mlm_logits", "nsp_logits"}) {
      INFO("batch " << batch << ", " << name);
      const int64_t n = numel(one.output_shape(name));
      const float *a = one.output(name), *r = three.output(name);
      double largest = 0, worst = 0;
      for (int64_t i = 0; i < n; ++i) largest = std::max(largest, std::abs(double(r[i]))), worst = std::max(worst, std::abs(double(a[i]) - r[i]));
      CHECK(worst <= 1e-4 * largest);
    }
  }
}

TEST_CASE("Training graph: outputs of recomputed kinds are read in the backward only as recomputations",
          "[runtime]") {
  RunSpec run;
  run.batch = 2;
  run.seq = 13;
  run.mode = RunMode::train;
  const Graph g = build_bert(small_config(), run);
  std::vector<int> producer(g.tensors().size(), -1);
  for (const auto& n : g.nodes())
    for (int t : n.outputs) producer[t] = n.id;
  std::map<OpKind, int> recomputations;
  std::set<std::string> names;
  int backward_reads = 0;
  for (const auto& n : g.nodes()) {
    if (n.phase != Phase::backward) continue;
    if (is_recomputation(n)) {
      ++recomputations[n.kind];
      INFO(n.name);
      CHECK(names.insert(n.name).second);  // each forward output is recomputed once
      const std::string fwd = n.name.substr(0, n.name.size() - std::string(".recompute").size());
      const auto it = std::find_if(g.nodes().begin(), g.nodes().end(), [&](const Node& f) { return f.name == fwd; });
      REQUIRE(it != g.nodes().end());
      CHECK(it->kind == n.kind);
      CHECK(it->phase == Phase::forward);
    }
    for (int t : n.inputs) {
      const int p = producer[t];
      if (p < 0 || g.node(p).phase != Phase::forward) continue;
      ++backward_reads;
      INFO(n.name << " reads " << g.tensor(t).name << ", written by " << g.node(p).name);
      // The forward copy of a recomputed output must be dead by the backward.
      CHECK_FALSE(recomputed_in_backward(g.node(p)));
    }
  }
  CHECK(backward_reads > 0);
  // Two layers: the layernorm outputs (embeddings and two per layer, each read by a weight
  // gradient) and the attention chain of each layer.
  for (OpKind k : {OpKind::layernorm, OpKind::attn_scores, OpKind::softmax, OpKind::dropout, OpKind::attn_context}) {
    INFO(to_string(k));
    CHECK(recomputations[k] >= 2);
  }
}

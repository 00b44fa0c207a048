// One test over every op kind of the table (runtime/op_table.h), as ggml's test-backend-ops:
// each case builds a small graph, runs it with the executor (the fast path, as the model runs
// it) and compares its output with the ops' references, also after new weights are packed
// again; then appends the backward as autodiff emits it and compares every gradient with
// central finite differences of the reference forward, L = sum(dy * f(x)) for a random dy, as
// a training step runs it: parameter gradients added to a gradient arena already filled, and
// again over two more micro-batches that read kept copies of the GEMMs' weights. The
// activation case runs every row of ops/activation.h, alone and fused into linear, so a new
// activation is covered by declaring it. Every case runs at several sets of sizes (Shapes:
// even, odd ones that leave every vector loop a tail, one row, width one). Every kind of the
// table must appear in some case's forward or backward graph: a kind declared without a case
// fails the test, naming the kind. Where the CPU has a native bf16 matmul, every case whose
// graph has a GEMM runs again with its GEMMs in bf16 (check_bf16) at the even and odd sizes;
// scripts/test.sh's capped-ISA runs cover the CPUs without.
#include <catch2/catch.hpp>
#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/optimizer.h"
#include "ops/peak.h"
#include "runtime/autodiff.h"
#include "runtime/executor.h"
#include "runtime/op_rules.h"
#include "test_util.h"

using namespace bertlab;
using bertlab::testing::random_ids;
using bertlab::testing::random_vector;
using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;

namespace {

// The values of a case's operands by tensor name: f32 weights and i32 graph inputs.
struct Values {
  std::map<std::string, Floats> f;
  std::map<std::string, Ints> i;
  const float* operator()(const std::string& name) const { return f.at(name).data(); }
  const int32_t* ids(const std::string& name) const { return i.at(name).data(); }
};

struct Case {
  Case(std::string l, std::function<int(Graph&)> b, std::function<Floats(const Values&)> r)
      : label(std::move(l)), build(std::move(b)), reference(std::move(r)) {}
  std::string label;
  std::function<int(Graph&)> build;                  // returns the checked output tensor
  std::function<Floats(const Values&)> reference;    // that output from the operands
  Values values;
  std::vector<std::string> wrt;  // operands whose gradient is checked; empty: no backward
  const char* loss = nullptr;    // a cross-entropy node: seeded as a loss, L = its loss sum
  std::function<double(const Values&)> loss_sum;  // that loss in double
  float denominator = 1;  // a loss: the step's loss denominator (StepContext), which L divides by
};

// Fast path vs reference, and gradient vs finite differences: normwise relative error.
constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 2e-3;  // float references, h = 1e-3: ~1e-4 rounding over h
constexpr float kStep = 1e-3f;

double rel_error(const Floats& got, const Floats& ref) {
  double diff = 0, top = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::abs(double(got[i]) - ref[i]));
    top = std::max(top, std::abs(double(ref[i])));
  }
  return top > 0 ? diff / top : diff;
}

Floats read(const float* p, const Shape& s) { return Floats(p, p + numel(s)); }

// Builds the case's graph with its operands placed: f32 operands are weights, i32 inputs.
struct Built {
  Graph g;
  int y = -1;
};
Built build(const Case& c) {
  Built b;
  b.y = c.build(b.g);
  return b;
}

// Parameters before the executor is made (inference packs its weights then), inputs after.
void fill_params(ParamStore& params, const Case& c) {
  for (const auto& [name, v] : c.values.f) std::copy(v.begin(), v.end(), params.data(name));
}
void fill_inputs(Executor& ex, const Case& c) {
  for (const auto& [name, v] : c.values.i) std::copy(v.begin(), v.end(), ex.input(name));
}

// Operands away from 0 by more than the step: the finite differences never straddle a kink.
Floats away_from_zero(Floats v) {
  for (auto& x : v) x = x < 0 ? x - 0.05f : x + 0.05f;
  return v;
}

// Graph builders: f32 operands are weights, i32 operands graph inputs.
int w(Graph& g, const std::string& name, Shape s) { return g.add_tensor(name, std::move(s), DType::f32, Role::weight); }
int ids(Graph& g, const std::string& name, Shape s) { return g.add_tensor(name, std::move(s), DType::i32, Role::input); }

// The sizes the cases run at. kSmall: a layer in small, its rows one AVX2 vector (H = 8).
// kOdd: sizes that are a multiple of no SIMD width (4, 8 or 16 floats) and longer than one
// vector, so every vector loop runs its body and its tail. kOneRow: one sequence of one token
// (M = 1, attention over one key). kWidthOne: rows of one element (H = K = N = 1, heads of
// size 1).
struct Shapes {
  const char* label;
  int64_t B, S, H, heads;  // head size H / heads
  int64_t N;               // linear: output features (K = H)
  int64_t vocab;           // embedding: word rows (positions: S + 1, types: 2)
  int64_t picked;          // gather_rows: rows picked per sequence
  int64_t rows, classes;   // cross_entropy: logits
  float eps;               // layernorm
  float spread;            // activation inputs in +-spread (GELU's and tanh's flat ends at 6)
  bool bf16;               // the cases with a GEMM again in bf16, where the CPU has it
};
constexpr Shapes kSmall{"B2 S3 H8", 2, 3, 8, 2, 5, 7, 2, 4, 5, 1e-5f, 1, true};
constexpr Shapes kOdd{"B3 S7 H51", 3, 7, 51, 3, 19, 11, 3, 7, 45, 1e-12f, 6, true};
constexpr Shapes kOneRow{"B1 S1 H51", 1, 1, 51, 3, 19, 5, 2, 1, 19, 1e-5f, 6, false};
constexpr Shapes kWidthOne{"B2 S3 H1", 2, 3, 1, 1, 1, 5, 2, 3, 2, 1e-5f, 1, false};

std::vector<Case> cases(const Shapes& sh) {
  const int64_t B = sh.B, S = sh.S, H = sh.H, heads = sh.heads, d = H / heads;
  std::vector<Case> out;
  uint32_t seed = 1;
  auto rnd = [&](int64_t n) { return random_vector(n, seed++); };
  auto add = [&](Case c) {
    c.label = fmt::format("{} [{}]", c.label, sh.label);
    out.push_back(std::move(c));
  };

  {  // embedding: three gathered tables; a repeated id adds its rows' gradients
    const int64_t V = sh.vocab, P = S + 1, T = 2;
    Case c{"embedding", [=](Graph& g) {
             return g.apply(OpKind::embedding, "emb", {ids(g, "ids", {B, S}), ids(g, "types", {B, S}),
                                                       w(g, "word", {V, H}), w(g, "pos", {P, H}), w(g, "type", {T, H})});
           },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::embedding_forward_reference(y.data(), v.ids("ids"), v.ids("types"), v("word"), v("pos"), v("type"), B, S, H);
             return y;
           }};
    Ints tokens = random_ids(B * S, V, 3);
    if (tokens.size() > 1) tokens[1] = tokens[0];
    c.values.i = {{"ids", tokens}, {"types", random_ids(B * S, T, 4)}};
    c.values.f = {{"word", rnd(V * H)}, {"pos", rnd(P * H)}, {"type", rnd(T * H)}};
    c.wrt = {"word", "pos", "type"};
    add(c);
  }
  {  // mask_bias: no gradient (depends on graph inputs only)
    Case c{"mask_bias", [=](Graph& g) { return g.apply(OpKind::mask_bias, "mask", {ids(g, "mask", {B, S})}); },
           [=](const Values& v) {
             Floats y(B * S);
             for (int64_t i = 0; i < B * S; ++i) y[i] = v.ids("mask")[i] ? 0.f : std::numeric_limits<float>::lowest();
             return y;
           }};
    c.values.i = {{"mask", random_ids(B * S, 2, 5)}};
    add(c);
  }
  // linear: with and without a residual, and with every activation fused (forward only: a
  // fused linear has no backward rule, autodiff runs before fusion).
  for (const auto& act : ops::kActivations)
    for (bool residual : {false, true}) {
      const int64_t M = B * S, N = sh.N, K = H;
      Case c{fmt::format("linear{} activation {}", residual ? " residual" : "", act.name),
             [=](Graph& g) {
               std::vector<int> in{w(g, "x", {B, S, K}), w(g, "w", {N, K}), w(g, "b", {N})};
               if (residual) in.push_back(w(g, "r", {B, S, N}));
               nlohmann::json attrs = nlohmann::json::object();
               if (act.act != ops::Activation::none) attrs["activation"] = act.name;
               return g.apply(OpKind::linear, "lin", in, attrs);
             },
             [=](const Values& v) {
               Floats y(M * N);
               ops::linear_forward_reference(y.data(), v("x"), v("w"), v("b"), residual ? v("r") : nullptr, M, N, K, act.act);
               return y;
             }};
      c.values.f = {{"x", away_from_zero(rnd(M * K))}, {"w", rnd(N * K)}, {"b", rnd(N)}};
      if (residual) c.values.f["r"] = rnd(M * N);
      if (act.act == ops::Activation::none) c.wrt = residual ? std::vector<std::string>{"x", "w", "b", "r"}
                                                             : std::vector<std::string>{"x", "w", "b"};
      add(c);
    }
  {  // attention: ctx = attn_context(attn_scores(qkv, bias), qkv); the scores need not be
     // probabilities for the products, and the backward of each needs the other.
    Case c{"attention", [=](Graph& g) {
             const int qkv = w(g, "qkv", {B, S, 3 * H});
             nlohmann::json a{{"heads", heads}, {"scale", 0.5}};
             const int scores = g.apply(OpKind::attn_scores, "scores", {qkv, w(g, "bias", {B, S})}, a);
             return g.apply(OpKind::attn_context, "context", {scores, qkv}, {{"heads", heads}});
           },
           [=](const Values& v) {
             Floats scores(B * heads * S * S), ctx(B * S * H);
             ops::attn_scores_reference(scores.data(), v("qkv"), v("bias"), B, S, heads, d, 0.5f);
             ops::attn_context_reference(ctx.data(), scores.data(), v("qkv"), B, S, heads, d);
             return ctx;
           }};
    c.values.f = {{"qkv", rnd(B * S * 3 * H)}, {"bias", rnd(B * S)}};
    c.wrt = {"qkv"};
    add(c);
  }
  {  // attention with its softmax: the executor runs the three forward nodes as one fused step
     // (runtime::fused_steps, ops::FusedAttention) when there are at least as many sequences as
     // threads; the backward recomputes scores and softmax
    Case c{"attention with softmax", [=](Graph& g) {
             const int qkv = w(g, "qkv", {B, S, 3 * H});
             nlohmann::json a{{"heads", heads}, {"scale", 0.5}};
             const int scores = g.apply(OpKind::attn_scores, "scores", {qkv, w(g, "bias", {B, S})}, a);
             const int probs = g.apply(OpKind::softmax, "probs", {scores});
             return g.apply(OpKind::attn_context, "context", {probs, qkv}, {{"heads", heads}});
           },
           [=](const Values& v) {
             Floats scores(B * heads * S * S), probs(scores.size()), ctx(B * S * H);
             ops::attn_scores_reference(scores.data(), v("qkv"), v("bias"), B, S, heads, d, 0.5f);
             ops::softmax_forward_reference(probs.data(), scores.data(), B * heads * S, S);
             ops::attn_context_reference(ctx.data(), probs.data(), v("qkv"), B, S, heads, d);
             return ctx;
           }};
    c.values.f = {{"qkv", rnd(B * S * 3 * H)}, {"bias", rnd(B * S)}};
    c.wrt = {"qkv"};
    add(c);
  }
  {
    Case c{"softmax", [=](Graph& g) { return g.apply(OpKind::softmax, "sm", {w(g, "x", {B, S, H})}); },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::softmax_forward_reference(y.data(), v("x"), B * S, H);
             return y;
           }};
    c.values.f = {{"x", rnd(B * S * H)}};
    c.wrt = {"x"};
    add(c);
  }
  {
    Case c{"add", [=](Graph& g) { return g.apply(OpKind::add, "add", {w(g, "a", {B, H}), w(g, "b", {B, H})}); },
           [=](const Values& v) {
             Floats y(B * H);
             ops::add_forward_reference(y.data(), v("a"), v("b"), B * H);
             return y;
           }};
    c.values.f = {{"a", rnd(B * H)}, {"b", rnd(B * H)}};
    c.wrt = {"a", "b"};
    add(c);
  }
  {
    Case c{"scale", [=](Graph& g) { return g.apply(OpKind::scale, "scale", {w(g, "x", {B, H})}, {{"alpha", 1.75}}); },
           [=](const Values& v) {
             Floats y(B * H);
             for (int64_t i = 0; i < B * H; ++i) y[i] = 1.75f * v("x")[i];
             return y;
           }};
    c.values.f = {{"x", rnd(B * H)}};
    c.wrt = {"x"};
    add(c);
  }
  {  // layernorm: inputs off centre (a mean to subtract), at the set's eps
    const float eps = sh.eps;
    Case c{"layernorm", [=](Graph& g) {
             return g.apply(OpKind::layernorm, "ln", {w(g, "x", {B, S, H}), w(g, "gamma", {H}), w(g, "beta", {H})},
                            {{"eps", eps}});
           },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::layernorm_forward_reference(y.data(), v("x"), v("gamma"), v("beta"), B * S, H, eps);
             return y;
           }};
    c.values.f = {{"x", random_vector(B * S * H, seed++, -1.f, 2.f)}, {"gamma", rnd(H)}, {"beta", rnd(H)}};
    c.wrt = {"x", "gamma", "beta"};
    add(c);
  }
  for (const auto& act : ops::kActivations) {
    if (act.act == ops::Activation::none) continue;
    Case c{fmt::format("activation {}", act.name),
           [=](Graph& g) { return g.apply(OpKind::activation, "act", {w(g, "x", {B, S, H})}, {{"activation", act.name}}); },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::activation_forward_reference(y.data(), v("x"), B * S * H, act.act);
             return y;
           }};
    c.values.f = {{"x", away_from_zero(random_vector(B * S * H, seed++, -sh.spread, sh.spread))}};
    c.wrt = {"x"};
    add(c);
  }
  {  // first_token: its definition, written out (the kernel has no separate reference)
    Case c{"first_token", [=](Graph& g) { return g.apply(OpKind::first_token, "cls", {w(g, "x", {B, S, H})}); },
           [=](const Values& v) {
             Floats y(B * H);
             for (int64_t b = 0; b < B; ++b)
               for (int64_t h = 0; h < H; ++h) y[b * H + h] = v("x")[b * S * H + h];
             return y;
           }};
    c.values.f = {{"x", rnd(B * S * H)}};
    c.wrt = {"x"};
    add(c);
  }
  {  // attention probabilities: softmax then dropout; the executor runs their backward as one
     // fused pass (runtime::fused_steps, ops::dropout_softmax_backward)
    Case c{"softmax then dropout",
           [=](Graph& g) {
             int sm = g.apply(OpKind::softmax, "sm", {w(g, "x", {B, S, H})});
             return g.apply(OpKind::dropout, "drop", {sm}, {{"p", 0.3}, {"salt", 11}});
           },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::softmax_forward_reference(y.data(), v("x"), B * S, H);
             const StepContext ctx;
             const ops::DropoutKey key{ctx.seed, uint64_t(ctx.step), uint64_t(ctx.micro)};
             for (int64_t i = 0; i < B * S * H; ++i) y[i] = ops::dropout_keeps(i, 0.3f, 11, key) ? y[i] / (1 - 0.3f) : 0.f;
             return y;
           }};
    c.values.f = {{"x", rnd(B * S * H)}};
    c.wrt = {"x"};
    add(c);
  }
  {  // dropout: the executor's first step (StepContext defaults: seed 0, step 1, micro 0)
    Case c{"dropout", [=](Graph& g) { return g.apply(OpKind::dropout, "drop", {w(g, "x", {B, S, H})}, {{"p", 0.3}, {"salt", 7}}); },
           [=](const Values& v) {
             Floats y(B * S * H);
             const StepContext ctx;
             const ops::DropoutKey key{ctx.seed, uint64_t(ctx.step), uint64_t(ctx.micro)};
             for (int64_t i = 0; i < B * S * H; ++i)
               y[i] = ops::dropout_keeps(i, 0.3f, 7, key) ? v("x")[i] / (1 - 0.3f) : 0.f;
             return y;
           }};
    c.values.f = {{"x", rnd(B * S * H)}};
    c.wrt = {"x"};
    add(c);
  }
  {  // a hidden-state dropout then the residual add: the executor runs them as one fused pass
     // (runtime::fused_steps, ops::dropout_add_forward)
    Case c{"dropout then residual add",
           [=](Graph& g) {
             int dropped = g.apply(OpKind::dropout, "drop", {w(g, "x", {B, S, H})}, {{"p", 0.2}, {"salt", 5}});
             return g.apply(OpKind::add, "residual", {dropped, w(g, "r", {B, S, H})});
           },
           [=](const Values& v) {
             Floats y(B * S * H);
             const StepContext ctx;
             const ops::DropoutKey key{ctx.seed, uint64_t(ctx.step), uint64_t(ctx.micro)};
             for (int64_t i = 0; i < B * S * H; ++i)
               y[i] = (ops::dropout_keeps(i, 0.2f, 5, key) ? v("x")[i] / (1 - 0.2f) : 0.f) + v("r")[i];
             return y;
           }};
    c.values.f = {{"x", rnd(B * S * H)}, {"r", rnd(B * S * H)}};
    c.wrt = {"x", "r"};
    add(c);
  }
  {  // gather_rows: every sequence's second pick repeats its first (their gradients add)
    const int64_t P = sh.picked;
    Case c{"gather_rows", [=](Graph& g) { return g.apply(OpKind::gather_rows, "gather", {w(g, "x", {B, S, H}), ids(g, "pos", {B, P})}); },
           [=](const Values& v) {
             Floats y(B * P * H);
             for (int64_t b = 0; b < B; ++b)
               for (int64_t p = 0; p < P; ++p)
                 for (int64_t h = 0; h < H; ++h) y[(b * P + p) * H + h] = v("x")[(b * S + v.ids("pos")[b * P + p]) * H + h];
             return y;
           }};
    Ints pos(B * P);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t p = 0; p < P; ++p) pos[b * P + p] = int32_t((p == 1 ? b : b + 2 * p) % S);
    c.values.f = {{"x", rnd(B * S * H)}};
    c.values.i = {{"pos", pos}};
    c.wrt = {"x"};
    add(c);
  }
  {  // cross_entropy: (loss sum, correct, count); its gradient is seeded as a loss, L = its loss
     // sum over the step's denominator (StepContext::mlm_denominator); the second row ignored
    const int64_t N = sh.rows, C = sh.classes;
    constexpr float kDenominator = 2.5f;
    Case c{"cross_entropy",
           [=](Graph& g) {
             return g.apply(OpKind::cross_entropy, "loss", {w(g, "logits", {N, C}), ids(g, "labels", {N})}, {{"loss", "mlm"}});
           },
           [=](const Values& v) {
             auto st = ops::cross_entropy_forward_reference(v("logits"), v.ids("labels"), N, C);
             return Floats{float(st.loss_sum), float(st.correct), float(st.count)};
           }};
    Ints labels = random_ids(N, int32_t(C), 6);
    if (N > 1) labels[1] = ops::kIgnoreLabel;
    c.values.f = {{"logits", random_vector(N * C, seed++, -4.f, 4.f)}};
    c.values.i = {{"labels", labels}};
    c.wrt = {"logits"};
    c.loss = "loss";
    c.denominator = kDenominator;
    c.loss_sum = [=](const Values& v) {
      return ops::cross_entropy_forward_reference(v("logits"), v.ids("labels"), N, C).loss_sum / kDenominator;
    };
    add(c);
  }
  {  // mul: its backward is two muls, each reading the other operand
    Case c{"mul", [=](Graph& g) { return g.apply(OpKind::mul, "mul", {w(g, "a", {B, S, H}), w(g, "b", {B, S, H})}); },
           [=](const Values& v) {
             Floats y(B * S * H);
             ops::mul_forward_reference(y.data(), v("a"), v("b"), B * S * H);
             return y;
           }};
    c.values.f = {{"a", rnd(B * S * H)}, {"b", rnd(B * S * H)}};
    c.wrt = {"a", "b"};
    add(c);
  }
  return out;
}

// bf16: every GEMM node of the graph runs on bf16 copies of its inputs (as a --precision bf16
// graph marks them); returns whether the graph has one.
bool mark_bf16(Graph& g) {
  bool any = false;
  for (const auto& node : g.nodes())
    if (node.category == Category::gemm && node_gemm(g, node)) {
      g.node(node.id).attrs["precision"] = "bf16";
      any = true;
    }
  return any;
}

// A case's forward graph on an executor in inference mode (weights packed once, at
// construction and on repack_weights()); bf16: its GEMMs in bf16.
class InferenceGraph {
 public:
  InferenceGraph(const Case& c, std::set<OpKind>& seen, bool bf16) {
    Built b = build(c);
    b.g.mark_output(b.y, "y");
    if (bf16) mark_bf16(b.g);
    for (const auto& n : b.g.nodes()) seen.insert(n.kind);
    shape_ = b.g.tensor(b.y).shape;
    params_ = ParamStore::for_graph(b.g);
    fill_params(params_, c);
    ex_ = std::make_unique<Executor>(std::move(b.g), params_);
    fill_inputs(*ex_, c);
  }
  Floats run() {
    ex_->run();
    return read(ex_->output("y"), shape_);
  }
  // New weights: written into the parameters, then packed again.
  void repack(const Case& c) {
    fill_params(params_, c);
    ex_->repack_weights();
  }

 private:
  Shape shape_;
  ParamStore params_;
  std::unique_ptr<Executor> ex_;
};

// Runs a case's forward graph (bf16: its GEMMs in bf16); returns the checked output.
Floats run_forward(const Case& c, std::set<OpKind>& seen, bool bf16 = false) {
  return InferenceGraph(c, seen, bf16).run();
}

// The case's values with every f32 operand drawn again.
Case redrawn(Case c, uint32_t seed) {
  for (auto& [name, v] : c.values.f) v = random_vector(static_cast<int64_t>(v.size()), seed++);
  return c;
}

// Fast path against reference; then new weights, packed again (Executor::repack_weights, as
// after loading a checkpoint into a running model): the output follows them.
void check_forward(const Case& c, std::set<OpKind>& seen) {
  InferenceGraph run(c, seen, false);
  const Floats got = run.run(), ref = c.reference(c.values);
  REQUIRE(got.size() == ref.size());
  {
    const double err = rel_error(got, ref);
    INFO(c.label << ": fast path vs reference, normwise relative error " << err);
    CHECK(err <= kForwardTol);
  }
  const Case next = redrawn(c, 77);
  run.repack(next);
  const double err_next = rel_error(run.run(), next.reference(next.values));
  INFO(c.label << ": after new weights and repack_weights, fast path vs reference, normwise relative error " << err_next);
  CHECK(err_next <= kForwardTol);
}

// L = sum(dy * reference(values)) (or the loss for a loss), in double.
double loss_of(const Case& c, const Values& v, const Floats& dy) {
  if (c.loss) return c.loss_sum(v);
  const Floats y = c.reference(v);
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) l += double(dy[i]) * y[i];
  return l;
}

// The case's graph with its backward appended (autodiff's rules), on an executor in training
// mode; the forward output and the gradients of c.wrt are graph outputs (bf16: every GEMM,
// forward and backward, in bf16). dy: the seed of a case without a loss.
class TrainingGraph {
 public:
  TrainingGraph(const Case& c, std::set<OpKind>& seen, const Floats& dy, bool bf16) : wrt_(c.wrt) {
    Built b = build(c);
    Case run = c;
    std::vector<std::pair<int, int>> seeds;
    if (!c.loss) {
      seeds.emplace_back(b.y, w(b.g, "dy", b.g.tensor(b.y).shape));
      run.values.f["dy"] = dy;
    }
    std::vector<int> wrt;
    for (const auto& name : c.wrt) wrt.push_back(b.g.tensor_id(name));
    const auto grads = append_backward_for(b.g, c.loss ? std::vector<std::string>{c.loss} : std::vector<std::string>{},
                                           seeds, wrt);
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO(c.label << ": no gradient flows to '" << c.wrt[i] << "'");
      REQUIRE(grads[i] >= 0);
      b.g.mark_output(grads[i], "d" + c.wrt[i]);
      if (b.g.tensor(grads[i]).role == Role::gradient) accumulated_.insert(c.wrt[i]);
    }
    b.g.mark_output(b.y, "y");
    if (bf16) mark_bf16(b.g);
    for (const auto& n : b.g.nodes()) seen.insert(n.kind);
    params_ = ParamStore::for_graph(b.g);
    state_ = std::make_unique<TrainingState>(params_);
    fill_params(params_, run);
    ex_ = std::make_unique<Executor>(std::move(b.g), params_, state_.get());
    fill_inputs(*ex_, run);
    ex_->context().mlm_denominator = ex_->context().nsp_denominator = c.denominator;
  }
  Executor& executor() { return *ex_; }
  // Whether the gradient of `name` is a parameter gradient, which the kernels add (+=) to the
  // gradient arena; the others are activation gradients, written.
  bool accumulated(const std::string& name) const { return accumulated_.count(name) != 0; }
  // Fills the gradient arena with random values, as earlier micro-batches would have left it.
  void prefill_gradients(uint32_t seed) {
    const Floats v = random_vector(state_->grads.arena_size(), seed);
    std::copy(v.begin(), v.end(), state_->grads.arena());
    prefill_ = v;
  }
  // The forward output and the gradients by name, each parameter gradient less the prefill.
  std::map<std::string, Floats> run() {
    ex_->run();
    std::map<std::string, Floats> out;
    out["y"] = read(ex_->output("y"), ex_->output_shape("y"));
    for (const auto& name : wrt_) {
      Floats g = read(ex_->output("d" + name), ex_->output_shape("d" + name));
      if (accumulated(name) && !prefill_.empty()) {
        const int64_t at = state_->grads.info(name).offset;
        for (size_t i = 0; i < g.size(); ++i) g[i] -= prefill_[at + i];
      }
      out[name] = std::move(g);
    }
    return out;
  }

 private:
  std::vector<std::string> wrt_;
  std::set<std::string> accumulated_;
  Floats prefill_;
  ParamStore params_;
  std::unique_ptr<TrainingState> state_;
  std::unique_ptr<Executor> ex_;
};

std::map<std::string, Floats> run_backward(const Case& c, std::set<OpKind>& seen, const Floats& dy, bool bf16) {
  return TrainingGraph(c, seen, dy, bf16).run();
}

// Values rounded to bf16 (nearest even, done here independently of oneDNN): a bf16 GEMM's
// casts of them are exact.
Floats rounded_to_bf16(Floats v) {
  for (float& x : v) {
    uint32_t u = std::bit_cast<uint32_t>(x);
    u += 0x7FFFu + ((u >> 16) & 1u);
    x = std::bit_cast<float>(u & 0xFFFF0000u);
  }
  return v;
}
Case rounded_to_bf16(Case c) {
  for (auto& [name, v] : c.values.f) v = rounded_to_bf16(std::move(v));
  return c;
}

// The seed of a case's backward (none for a loss): random, one value per output element.
Floats seed_of(const Case& c) {
  if (c.loss) return {};
  Built b = build(c);
  return random_vector(numel(b.g.tensor(b.y).shape), 99);
}

// Central differences of L in every element of operand `name`.
Floats finite_differences(const Case& c, const std::string& name, const Floats& dy) {
  Values v = c.values;
  Floats& x = v.f.at(name);
  Floats fd(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = x0 + kStep;
    const double up = loss_of(c, v, dy);
    x[i] = x0 - kStep;
    const double down = loss_of(c, v, dy);
    x[i] = x0;
    fd[i] = static_cast<float>((up - down) / (2.0 * kStep));
  }
  return fd;
}

bool bit_identical(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Appends the backward and compares every gradient of c.wrt with central differences, as a
// training step runs it: over a gradient arena that earlier micro-batches filled (parameter
// gradients add to it). Then two more runs as later micro-batches of one optimizer step, which
// read the GEMMs' weights from copies kept since the first of them (a nonzero
// StepContext::weights_version): the forward output and the activation gradients are written
// again, the same bits; the parameter gradients add up to three times theirs.
void check_backward(const Case& c, std::set<OpKind>& seen) {
  const Floats dy = seed_of(c);
  TrainingGraph t(c, seen, dy, false);
  t.prefill_gradients(123);
  const auto first = t.run();
  {
    const double ey = rel_error(first.at("y"), c.reference(c.values));
    INFO(c.label << ": forward output of the training graph vs reference, normwise relative error " << ey);
    CHECK(ey <= kForwardTol);
  }
  std::map<std::string, Floats> fd;
  for (const auto& name : c.wrt) {
    fd[name] = finite_differences(c, name, dy);
    const double err = rel_error(first.at(name), fd[name]);
    INFO(c.label << ": gradient of '" << name << "'" << (t.accumulated(name) ? " (added to a filled arena)" : "")
                 << " vs central differences, normwise relative error " << err);
    CHECK(err <= kGradTol);
  }
  t.executor().context().weights_version = next_weights_version();
  t.run();
  auto third = t.run();
  {
    INFO(c.label << ": forward output, micro-batch 3 (kept weight copies) vs 1: not the same bits");
    CHECK(bit_identical(third.at("y"), first.at("y")));
  }
  for (const auto& name : c.wrt) {
    if (!t.accumulated(name)) {
      INFO(c.label << ": gradient of '" << name << "', micro-batch 3 (kept weight copies) vs 1: not the same bits");
      CHECK(bit_identical(third.at(name), first.at(name)));
      continue;
    }
    Floats each = third.at(name);
    for (float& g : each) g /= 3;
    const double err = rel_error(each, fd.at(name));
    INFO(c.label << ": gradient of '" << name << "' summed over 3 micro-batches, over 3, vs central differences, "
                 << "normwise relative error " << err);
    CHECK(err <= kGradTol);
  }
}

// bf16, for a case whose graph (forward, or with its backward) has a GEMM: the same graph with
// every GEMM in bf16 against the f32 run, which the checks above tie to the references.
//  - Operands rounded to bf16 first: a GEMM's casts of them are exact and its products exact in
//    f32, so the forward output differs from the f32 run by accumulation order only
//    (kForwardTol). A GEMM that reads values the graph computed (dy through an
//    activation or softmax gradient, dS, P): each cast to bf16 with relative error at most
//    u = 2^-9 per element, so each product term carries at most u of |a||b|, and the normwise
//    error max|d| / max|g| at most u * max(|A||B|) / max|AB|; kBf16GradTol allows that ratio
//    up to 4 (it is 1 when every term has one sign; these cases' random operands give 1-3).
//  - Operands as they are: bf16 rounding shows (at least 1e-4 on some output or gradient, so the
//    bf16 kernels really ran) and stays within kBf16AsIsTol: both operands of a product rounded,
//    each term carries up to 2u of |a||b|, and over a K-term sum of random signs (K = 51 at the
//    odd sizes) against an output squashed to |y| <= 1 (tanh) that is up to about 10 * 2u.
constexpr double kBf16GradTol = 4.0 / 512;
constexpr double kBf16AsIsTol = 10 * 2.0 / 512;
// Whether a bf16 GEMM of the graph reads a value another node computed (then its cast rounds).
bool gemm_reads_computed(const Graph& g) {
  std::set<int> computed;
  for (const auto& n : g.nodes()) computed.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& n : g.nodes())
    if (gemm_bf16(n))
      for (int t : n.inputs)
        if (computed.count(t)) return true;
  return false;
}
void check_bf16(const Case& c, std::set<OpKind>& seen) {
  Built fwd = build(c);
  Built bwd = build(c);
  if (!c.wrt.empty()) {
    std::vector<int> wrt;
    for (const auto& name : c.wrt) wrt.push_back(bwd.g.tensor_id(name));
    std::vector<std::pair<int, int>> seeds;
    if (!c.loss) seeds.emplace_back(bwd.y, w(bwd.g, "dy", bwd.g.tensor(bwd.y).shape));
    append_backward_for(bwd.g, c.loss ? std::vector<std::string>{c.loss} : std::vector<std::string>{}, seeds, wrt);
  }
  const bool fwd_gemm = mark_bf16(fwd.g), bwd_gemm = mark_bf16(bwd.g);
  if (!fwd_gemm && !bwd_gemm) return;  // no GEMM: nothing runs in bf16
  const double fwd_tol = gemm_reads_computed(fwd.g) ? kBf16GradTol : kForwardTol;
  const double bwd_tol = gemm_reads_computed(bwd.g) ? kBf16GradTol : kForwardTol;
  const Floats dy = seed_of(c);
  double shown = 0;  // the largest difference from f32 on operands as they are
  for (bool exact : {true, false}) {
    const Case run = exact ? rounded_to_bf16(c) : c;
    const Floats y16 = run_forward(run, seen, true), y32 = run_forward(run, seen, false);
    const double ey = rel_error(y16, y32);
    INFO(c.label << " bf16" << (exact ? " (operands exact in bf16)" : "") << ": forward vs f32, normwise relative error " << ey);
    fmt::print("  bf16 {:<44} {:<7} forward        {:9.2e}  (tol {:.1e})\n", c.label, exact ? "exact" : "as-is",
               ey, exact ? fwd_tol : kBf16AsIsTol);
    if (exact) CHECK(ey <= fwd_tol);
    else CHECK(ey <= kBf16AsIsTol);
    if (!exact) shown = std::max(shown, ey);
    if (c.wrt.empty()) continue;
    const Floats seed = exact ? rounded_to_bf16(dy) : dy;
    const auto g16 = run_backward(run, seen, seed, true), g32 = run_backward(run, seen, seed, false);
    for (const auto& name : c.wrt) {
      const double eg = rel_error(g16.at(name), g32.at(name));
      INFO(c.label << " bf16" << (exact ? " (operands exact in bf16)" : "") << ": gradient of '" << name
                   << "' vs f32, normwise relative error " << eg);
      fmt::print("  bf16 {:<44} {:<7} d{:<13} {:9.2e}  (tol {:.1e})\n", c.label, exact ? "exact" : "as-is", name, eg,
                 exact ? bwd_tol : kBf16AsIsTol);
      CHECK(eg <= (exact ? bwd_tol : kBf16AsIsTol));
      if (!exact) shown = std::max(shown, eg);
    }
  }
  INFO(c.label << " bf16: no output or gradient differs from f32 by 1e-4: did the bf16 kernels run?");
  CHECK(shown >= 1e-4);
}

// Every case at one set of sizes: forward, backward, and bf16 where the set asks for it; every
// kind of the table must run in some case.
void check_every_kind(const Shapes& sh) {
  std::set<OpKind> seen;
  for (const auto& c : cases(sh)) {
    check_forward(c, seen);
    if (!c.wrt.empty()) check_backward(c, seen);
  }
  // Every case again with its GEMMs in bf16, where this CPU has a native bf16 matmul (the
  // capped-ISA runs of scripts/test.sh run this test without it: skipped there, with a note).
  if (sh.bf16) {
    if (ops::cpu_has_bf16()) {
      for (const auto& c : cases(sh)) check_bf16(c, seen);
    } else {
      WARN("bf16 cases skipped: no native bf16 matmul on this CPU");
    }
  }
  // The optimizer and communication kinds are covered by the training tests: the updates
  // against their references in test_ops_backward.cpp and the whole step in test_train_loop,
  // the allreduce (it needs MPI ranks) in test_distributed.
  for (OpKind k : {OpKind::grad_norm, OpKind::adamw_update, OpKind::lamb_update, OpKind::allreduce})
    seen.insert(k);
  for (const auto& info : kOpTable) {
    INFO("op kind '" << info.name << "' is in the op table but no case of tests/test_op_table.cpp runs it ["
                     << sh.label << "]");
    CHECK(seen.count(info.kind) == 1);
  }
}

}  // namespace

TEST_CASE("Every op kind: fast path equals reference, backward equals finite differences", "[ops][op_table]") {
  check_every_kind(kSmall);
}

TEST_CASE("Every op kind at odd sizes (B3 S7 H51: every vector loop's tail)", "[ops][op_table]") {
  check_every_kind(kOdd);
}

TEST_CASE("Every op kind at one row (B1 S1: M = 1)", "[ops][op_table]") { check_every_kind(kOneRow); }

TEST_CASE("Every op kind at width one (H = K = N = 1)", "[ops][op_table]") { check_every_kind(kWidthOne); }

TEST_CASE("Every op kind's rules are complete: shapes, costs, kernel; a GEMM exactly for the gemm kinds",
          "[op_table]") {
  for (const auto& info : kOpTable) {
    const OpRules& r = op_rules(info.kind);
    INFO("op kind '" << info.name << "': its rules (runtime/rules/) lack a function");
    CHECK(r.infer != nullptr);
    CHECK(r.flops != nullptr);
    CHECK(r.min_bytes != nullptr);
    CHECK(r.kernel != nullptr);
    INFO("op kind '" << info.name << "': category " << to_string(info.category) << " but "
                     << (r.gemm ? "a" : "no") << " GEMM in its rules");
    CHECK((r.gemm != nullptr) == (info.category == Category::gemm));
    // The forward kinds are differentiated (cross_entropy is seeded as a loss instead).
    INFO("op kind '" << info.name << "': phase " << to_string(info.phase) << " but "
                     << (r.backward ? "a" : "no") << " backward rule");
    CHECK((r.backward != nullptr) == (info.phase == Phase::forward && info.kind != OpKind::cross_entropy));
  }
}

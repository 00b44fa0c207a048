// bf16 GEMMs (mixed precision): every GEMM kernel run with bf16 inputs equals the double
// reference on inputs rounded to bf16 (round to nearest even, done here independently of
// oneDNN), i.e. only the inputs are rounded and accumulation stays f32. The f32 result on the
// unrounded inputs is far from it, so the tests also show that the bf16 path really ran.
// Then the graph marks, and whole BERT inference and training in bf16 against fp32.
#include <catch2/catch.hpp>

#include <fmt/core.h>
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "ops/bf16.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "apps/profile_common.h"
#include "ops/peak.h"
#include "runtime/bert_builder.h"
#include "runtime/executor.h"
#include "runtime/fusion.h"
#include "runtime/memory_plan.h"
#include "runtime/model.h"
#include "runtime/train_step.h"
#include "test_util.h"
#include "test_configs.h"

using namespace bertlab;
using bertlab::app::synthetic_inputs;
using bertlab::testing::random_vector;
using ops::Activation;

namespace {

// Round to nearest even at 8 mantissa bits (finite inputs).
float round_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xFFFF0000u);
}

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

// Normwise relative error max|a - b| / max|b|.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(std::isfinite(a[i]));
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

// bf16 result `got` against the reference on rounded inputs (`ref16`, f32 accumulation error
// only: the products of two bf16 numbers are exact in f32; bound as for f32 GEMMs, 1e-5) and
// against the reference on the unrounded inputs (`ref32`: bf16 input rounding, 2^-9 relative
// per input, leaves errors of order 1e-3, far above 1e-5).
void check_bf16(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref16,
                const std::vector<float>& ref32) {
  const double e16 = rel_error(got, ref16), e32 = rel_error(got, ref32);
  fmt::print("  {:<40} vs rounded-input reference {:9.2e}, vs f32 reference {:9.2e}\n", name, e16, e32);
  INFO(name << ": " << e16 << " vs the rounded-input reference, " << e32 << " vs f32");
  CHECK(e16 <= 1e-5);
  CHECK(e32 >= 1e-4);  // the inputs really were rounded
  CHECK(e32 <= 2e-2);
}

}  // namespace

TEST_CASE("bf16 linear layers equal the reference on bf16-rounded inputs", "[ops][bf16]") {
  if (!ops::cpu_has_bf16()) {
    WARN("skipped: no native bf16 matmul on this CPU");
    return;
  }
  const int64_t M = 37, N = 53, K = 29;
  auto x = random_vector(M * K, 1), w = random_vector(N * K, 2), b = random_vector(N, 3),
       r = random_vector(M * N, 4);
  const auto x16 = rounded(x), w16 = rounded(w);
  for (bool packed : {true, false})
    for (const auto& row : ops::kActivations)
      for (bool residual : {false, true}) {
        const Activation act = row.act;
        std::vector<float> got(M * N), ref16(M * N), ref32(M * N);
        ops::Linear lin(M, N, K, act, residual, packed, /*bf16=*/true);
        const float* res = residual ? r.data() : nullptr;
        if (packed) {
          lin.pack_weights(w.data());
          lin.forward(got.data(), x.data(), b.data(), res);
        } else {
          lin.forward_packed(w.data(), got.data(), x.data(), b.data(), res);
        }
        // Weights prepared once (packed, or cast to bf16) into a copy kept by the caller, as
        // training keeps them across micro-batches: the same bits as preparing on every call.
        CHECK_FALSE(lin.weights_in_place());
        std::vector<std::byte> kept(static_cast<size_t>(lin.packed_bytes()));
        lin.pack_weights_into(w.data(), kept.data());
        std::vector<float> again(M * N);
        lin.forward_prepared(kept.data(), again.data(), x.data(), b.data(), res);
        CHECK(again == got);
        // Bias and residual are added in f32: not rounded.
        ops::linear_forward_reference(ref16.data(), x16.data(), w16.data(), b.data(), res, M, N, K, act);
        ops::linear_forward_reference(ref32.data(), x.data(), w.data(), b.data(), res, M, N, K, act);
        check_bf16(fmt::format("linear {} act {} residual {}", packed ? "packed" : "unpacked",
                               row.name, residual),
                   got, ref16, ref32);
      }

  // Handed over in bf16 (ops::LinearBf16Io): a GELU layer writing y as bf16 into a linear layer
  // with a residual reading it as x gives the bits of the f32 hand-over with its cast.
  {
    const int64_t N2 = 23;
    auto w2 = random_vector(N2 * N, 9), b2 = random_vector(N2, 10), r2 = random_vector(M * N2, 11);
    ops::Linear first32(M, N, K, Activation::gelu, false, true, true), second32(M, N2, N, Activation::none, true, true, true);
    ops::Linear first16(M, N, K, Activation::gelu, false, true, true, {false, true});
    ops::Linear second16(M, N2, N, Activation::none, true, true, true, {true, false});
    for (auto* l : {&first32, &first16}) l->pack_weights(w.data());
    for (auto* l : {&second32, &second16}) l->pack_weights(w2.data());
    std::vector<float> mid(M * N), out32(M * N2), out16(M * N2);
    std::vector<uint16_t> mid16(M * N);
    first32.forward(mid.data(), x.data(), b.data(), nullptr);
    second32.forward(out32.data(), mid.data(), b2.data(), r2.data());
    first16.forward(reinterpret_cast<float*>(mid16.data()), x.data(), b.data(), nullptr);
    for (int64_t i = 0; i < M * N; ++i) REQUIRE(mid16[size_t(i)] == ops::to_bf16(mid[size_t(i)]));
    second16.forward(out16.data(), reinterpret_cast<const float*>(mid16.data()), b2.data(), r2.data());
    CHECK(out16 == out32);
    CHECK_THROWS_WITH(ops::Linear(M, N, K, Activation::none, false, true, false, {true, false}),
                      Catch::Contains("bf16 input or output on an f32 GEMM"));
  }

  // Backward: dx = dy w, dw += dy^T x (the bias gradient sums dy in f32).
  auto dy = random_vector(M * N, 5);
  const auto dy16 = rounded(dy);
  std::vector<float> dx(M * K), dx16(M * K), dx32(M * K);
  ops::LinearGradInput grad_input(M, N, K, true);
  grad_input.forward(dx.data(), dy.data(), w.data());
  {  // the weights' bf16 copy kept by the caller gives the same bits
    std::vector<std::byte> kept(grad_input.weight_copy_bytes());
    REQUIRE(kept.size() == size_t(N * K) * sizeof(uint16_t));
    grad_input.cast_weights_into(w.data(), kept.data());
    std::vector<float> again(M * K);
    grad_input.forward_cast(again.data(), dy.data(), kept.data());
    CHECK(again == dx);
    CHECK(ops::LinearGradInput(M, N, K, false).weight_copy_bytes() == 0);  // f32 reads w in place
  }
  ops::linear_grad_input_reference(dx16.data(), dy16.data(), w16.data(), M, N, K);
  ops::linear_grad_input_reference(dx32.data(), dy.data(), w.data(), M, N, K);
  check_bf16("linear grad input", dx, dx16, dx32);

  auto dw0 = random_vector(N * K, 6), db0 = random_vector(N, 7);  // gradients accumulate
  auto dw = dw0, dw16 = dw0, dw32 = dw0, db = db0, db_ref = db0, db_unused = db0;
  ops::LinearGradWeight(M, N, K, true).forward(dw.data(), db.data(), dy.data(), x.data());
  ops::linear_grad_weight_reference(dw16.data(), db_ref.data(), dy16.data(), x16.data(), M, N, K);
  ops::linear_grad_weight_reference(dw32.data(), db_unused.data(), dy.data(), x.data(), M, N, K);
  check_bf16("linear grad weight", dw, dw16, dw32);
  // The bias gradient never goes through bf16.
  CHECK(rel_error(db, db_unused) <= 1e-6);

  // A dX GEMM built with share_dy leaves its bf16 copy of dy, and dy's column sums, for the dW
  // GEMM of the layer, which then gives the bits of casting and summing dy itself (the same
  // per-thread chunks, in the same order). A poisoned f32 dy passed to the sharing dW GEMM
  // shows that it reads neither.
  ops::LinearGradInput shared_input(M, N, K, true, /*share_dy=*/true);
  ops::LinearGradWeight shared_weight(M, N, K, true, /*share_dy=*/true);
  std::vector<float> dx_shared(M * K), dw_shared = dw0, db_shared = db0;
  shared_input.forward(dx_shared.data(), dy.data(), w.data());
  CHECK(dx_shared == dx);
  const auto poisoned = random_vector(M * N, 8);
  shared_weight.forward(dw_shared.data(), db_shared.data(), dy.data(), x.data());
  CHECK(dw_shared == dw);
  CHECK(db_shared == db);
  shared_input.forward(dx_shared.data(), dy.data(), w.data());
  dw_shared = dw0, db_shared = db0;
  shared_weight.forward(dw_shared.data(), db_shared.data(), poisoned.data(), x.data());
  CHECK(dw_shared == dw);  // the product read the shared copy of dy
  CHECK(db_shared == db);  // the bias gradient folded the shared column sums
}

TEST_CASE("cast_rows_to_bf16 rounds strided rows as oneDNN's reorder does", "[ops][bf16]") {
  // Special values land in both the vector body and the scalar tail of each row (width 19).
  const float specials[] = {0.f, -0.f, 1.f + 0x1p-8f /* tie, rounds to even */, 1.f + 0x1p-7f + 0x1p-8f /* tie, up */,
                            1.f + 0x1p-8f + 0x1p-20f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(), -1e-39f, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::lowest(), 3.3895314e38f};
  struct Shape {
    int64_t rows, width, stride;
  };
  const Shape shapes[] = {{7, 19, 45}, {3, 5, 5}, {2, 33, 40}};
  std::vector<std::vector<float>> src;
  std::vector<std::vector<uint16_t>> got;
  for (size_t j = 0; j < std::size(shapes); ++j) {
    const auto& s = shapes[j];
    src.push_back(random_vector(s.rows * s.stride, 40 + int(j), -3.f, 3.f));
    for (size_t i = 0; i < src[j].size(); i += 5) src[j][i] = specials[(i / 5 + j) % std::size(specials)];
    got.emplace_back(s.rows * s.width + 8, uint16_t(0xABCD));  // 8 sentinels after the copy
  }
  auto job = [&](size_t j) {
    return ops::Bf16Rows{src[j].data(), shapes[j].rows, shapes[j].width, shapes[j].stride, got[j].data()};
  };
  ops::cast_rows_to_bf16({job(0), job(1), job(2)});
  const bool native = ops::cpu_has_bf16();

  auto& ctx = ops::dnnl_context();
  for (size_t j = 0; j < std::size(shapes); ++j) {
    const auto& s = shapes[j];
    // oneDNN's reorder of the strided view into a dense bf16 array.
    dnnl::memory::desc view({s.rows, s.width}, dnnl::memory::data_type::f32, dnnl::memory::dims{s.stride, 1});
    dnnl::memory::desc dense({s.rows, s.width}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
    std::vector<uint16_t> want(s.rows * s.width);
    dnnl::memory from(view, ctx.engine, src[j].data()), to(dense, ctx.engine, want.data());
    dnnl::reorder(from, to).execute(ctx.stream, from, to);
    ctx.stream.wait();
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.width; ++c) {
        const float x = src[j][r * s.stride + c];
        const uint16_t g = got[j][r * s.width + c];
        INFO("job " << j << " row " << r << " col " << c << " x " << x);
        if (std::isnan(x)) {
          CHECK(std::isnan(std::bit_cast<float>(uint32_t(g) << 16)));
          continue;
        }
        // Where bf16 products run (native bf16), bertlab's casts and oneDNN's reorders feed the
        // same GEMMs and must agree bit for bit. Below it oneDNN emulates the conversion and
        // treats zeros and denormals its own way (measured: -0 becomes +0 capped at AVX2 and in
        // the generic reorder aarch64 runs, which computes alpha * x + 0; a denormal is rounded
        // to a bf16 denormal instead of flushed capped at AVX512_CORE); bertlab flushes to a
        // zero of the sign, as the native instruction does.
        if (native || std::isnormal(x) || std::isinf(x)) CHECK(g == want[r * s.width + c]);
        else CHECK(std::abs(std::bit_cast<float>(uint32_t(want[r * s.width + c]) << 16)) < 0x1p-126f);
        if (x == 0.f) CHECK(std::signbit(std::bit_cast<float>(uint32_t(g) << 16)) == std::signbit(x));
        CHECK(g == ops::to_bf16(x));
        // Normal finite values: the test's own rounding, independent of both.
        if (std::isnormal(x)) CHECK(std::bit_cast<float>(uint32_t(g) << 16) == round_bf16(x));
      }
    for (int64_t i = s.rows * s.width; i < int64_t(got[j].size()); ++i) CHECK(got[j][i] == 0xABCD);
  }
  // Ties round to even, denormals to a zero of their sign.
  CHECK(ops::to_bf16(1.f + 0x1p-8f) == 0x3F80);
  CHECK(ops::to_bf16(1.f + 0x1p-7f + 0x1p-8f) == 0x3F82);
  CHECK(ops::to_bf16(-1e-39f) == 0x8000);
}

TEST_CASE("bf16 attention products equal the reference on bf16-rounded inputs", "[ops][bf16]") {
  if (!ops::cpu_has_bf16()) {
    WARN("skipped: no native bf16 matmul on this CPU");
    return;
  }
  // Ragged sizes, and one with full 16-wide rows and several heads per row of qkv.
  const auto [B, S, heads, d] = GENERATE(table<int64_t, int64_t, int64_t, int64_t>({{2, 13, 3, 7}, {3, 40, 4, 16}}));
  const int64_t H = heads * d;
  const float scale = 1.f / std::sqrt(float(d));
  auto qkv = random_vector(B * S * 3 * H, 21), bias = random_vector(B * S, 22, -2.f, 0.f);
  auto probs = random_vector(B * heads * S * S, 23, 0.f, 1.f), dctx = random_vector(B * S * H, 24),
       dscores = random_vector(B * heads * S * S, 25);
  const auto qkv16 = rounded(qkv), probs16 = rounded(probs), dctx16 = rounded(dctx),
             dscores16 = rounded(dscores);
  const int64_t n_scores = B * heads * S * S, n_qkv = B * S * 3 * H;

  std::vector<float> got(n_scores), ref16(n_scores), ref32(n_scores);
  ops::AttentionScores(B, S, heads, d, scale, true).forward(got.data(), qkv.data(), bias.data());
  ops::attn_scores_reference(ref16.data(), qkv16.data(), bias.data(), B, S, heads, d, scale);
  ops::attn_scores_reference(ref32.data(), qkv.data(), bias.data(), B, S, heads, d, scale);
  check_bf16("attention scores", got, ref16, ref32);
  {  // no padding: the matmul without the bias post-op
    const std::vector<float> zero(bias.size(), 0.f);
    std::vector<float> got0(n_scores), ref0_16(n_scores), ref0_32(n_scores);
    ops::AttentionScores(B, S, heads, d, scale, true).forward(got0.data(), qkv.data(), zero.data());
    ops::attn_scores_reference(ref0_16.data(), qkv16.data(), zero.data(), B, S, heads, d, scale);
    ops::attn_scores_reference(ref0_32.data(), qkv.data(), zero.data(), B, S, heads, d, scale);
    check_bf16("attention scores, no mask", got0, ref0_16, ref0_32);
  }

  std::vector<float> ctx(B * S * H), ctx16(B * S * H), ctx32(B * S * H);
  ops::AttentionContext(B, S, heads, d, true).forward(ctx.data(), probs.data(), qkv.data());
  ops::attn_context_reference(ctx16.data(), probs16.data(), qkv16.data(), B, S, heads, d);
  ops::attn_context_reference(ctx32.data(), probs.data(), qkv.data(), B, S, heads, d);
  check_bf16("attention context", ctx, ctx16, ctx32);
  {  // qkv handed over in bf16 (inference): Q, K and V copied from it, the products' bits unchanged
    std::vector<uint16_t> qkv_bf16(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv_bf16[i] = ops::to_bf16(qkv[i]);
    const auto* q16 = reinterpret_cast<const float*>(qkv_bf16.data());
    std::vector<float> got16(n_scores), ctx_q16(B * S * H);
    ops::AttentionScores(B, S, heads, d, scale, true, true).forward(got16.data(), q16, bias.data());
    CHECK(got16 == got);
    ops::AttentionContext(B, S, heads, d, true, false, true).forward(ctx_q16.data(), probs.data(), q16);
    CHECK(ctx_q16 == ctx);
  }
  {  // written as bf16 (an inference handoff): the f32 result rounded to nearest even, bit for bit
    std::vector<uint16_t> ctx_bf16(B * S * H);
    ops::AttentionContext(B, S, heads, d, true, true)
        .forward(reinterpret_cast<float*>(ctx_bf16.data()), probs.data(), qkv.data());
    size_t same = 0;
    for (size_t i = 0; i < ctx.size(); ++i) same += ctx_bf16[i] == ops::to_bf16(ctx[i]);
    CHECK(same == ctx.size());
  }

  using K = ops::AttentionGrad::Kind;
  for (auto [kind, name] : {std::pair{K::scores_q, "grad Q (dS K)"}, {K::scores_k, "grad K (dS^T Q)"},
                            {K::context_probs, "grad P (dctx V^T)"}, {K::context_v, "grad V (P^T dctx)"}}) {
    const bool to_scores = kind == K::context_probs;
    const int64_t n = to_scores ? n_scores : n_qkv;
    std::vector<float> g(n, 0.f), r16(n, 0.f), r32(n, 0.f);  // thirds not written stay 0
    ops::AttentionGrad op(kind, B, S, heads, d, scale, true);
    switch (kind) {
      case K::scores_q:
      case K::scores_k: {
        const auto slot = kind == K::scores_q ? ops::QkvSlot::q : ops::QkvSlot::k;
        op.forward(g.data(), dscores.data(), qkv.data());
        ops::attn_scores_grad_reference(r16.data(), dscores16.data(), qkv16.data(), B, S, heads, d, scale, slot);
        ops::attn_scores_grad_reference(r32.data(), dscores.data(), qkv.data(), B, S, heads, d, scale, slot);
        break;
      }
      case K::context_probs:
        op.forward(g.data(), dctx.data(), qkv.data());
        ops::attn_context_grad_probs_reference(r16.data(), dctx16.data(), qkv16.data(), B, S, heads, d);
        ops::attn_context_grad_probs_reference(r32.data(), dctx.data(), qkv.data(), B, S, heads, d);
        break;
      case K::context_v:
        op.forward(g.data(), dctx.data(), probs.data());
        ops::attn_context_grad_v_reference(r16.data(), dctx16.data(), probs16.data(), B, S, heads, d);
        ops::attn_context_grad_v_reference(r32.data(), dctx.data(), probs.data(), B, S, heads, d);
        break;
    }
    check_bf16(name, g, r16, r32);
  }
}

TEST_CASE("bf16 attention backward GEMMs read the casts an earlier GEMM left in their slots", "[ops][bf16]") {
  if (!ops::cpu_has_bf16()) {
    WARN("skipped: no native bf16 matmul on this CPU");
    return;
  }
  const int64_t B = 2, S = 24, heads = 3, d = 16, H = heads * d;
  const float scale = 0.25f;
  const auto qkv = random_vector(B * S * 3 * H, 31), bias = random_vector(B * S, 32, -2.f, 0.f);
  const auto probs = random_vector(B * heads * S * S, 33, 0.f, 1.f), dctx = random_vector(B * S * H, 34),
             dscores = random_vector(B * heads * S * S, 35);
  // A reused input is not read: NaNs there change nothing when the copy in the slot is used.
  const std::vector<float> nan_qkv(qkv.size(), std::numeric_limits<float>::quiet_NaN()),
      nan_scores(dscores.size(), std::numeric_limits<float>::quiet_NaN()),
      nan_ctx(dctx.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> scores(B * heads * S * S);
  using K = ops::AttentionGrad::Kind;
  auto run = [&](K kind, unsigned reuse, const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> out(kind == K::context_probs ? B * heads * S * S : B * S * 3 * H, 0.f);
    ops::AttentionGrad(kind, B, S, heads, d, scale, true, reuse).forward(out.data(), a.data(), b.data());
    return out;
  };
  // Each expected result without reuse first; then the writer, then the reader with reuse.
  const auto dv = run(K::context_v, 0, dctx, probs), dq = run(K::scores_q, 0, dscores, qkv),
             dk = run(K::scores_k, 0, dscores, qkv);
  run(K::context_probs, 0, dctx, qkv);  // casts dctx into slot 0
  CHECK(run(K::context_v, 1, nan_ctx, probs) == dv);
  ops::AttentionScores(B, S, heads, d, scale, true).forward(scores.data(), qkv.data(), bias.data());  // Q, K
  CHECK(run(K::scores_q, 2, dscores, nan_qkv) == dq);  // and casts dS into slot 0
  CHECK(run(K::scores_k, 3, nan_scores, nan_qkv) == dk);
  // Without reuse the NaNs are read (the checks above would pass with any reused value).
  const auto poisoned = run(K::scores_k, 0, nan_scores, qkv);
  CHECK(std::any_of(poisoned.begin(), poisoned.end(), [](float v) { return std::isnan(v); }));
}

TEST_CASE("bf16 probabilities: a dropout writes them in bf16 and the attention products read them in place",
          "[ops][bf16]") {
  // The dropout: the f32 kernel's values rounded, bit for bit (odd length, a chunk boundary).
  for (const int64_t n : {int64_t{1}, int64_t{2047}, int64_t{5000}}) {
    const auto x = random_vector(n, 41);
    std::vector<float> y(n);
    std::vector<uint16_t> y16(n), overlap(3 * n);
    const ops::DropoutKey key{7, 3, 1};
    ops::dropout_forward(y.data(), x.data(), n, 0.1f, 99, key);
    ops::dropout_forward_bf16(y16.data(), x.data(), n, 0.1f, 99, key);
    size_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += y16[i] == ops::to_bf16(y[i]);
    CHECK(same == size_t(n));
    // Over its own input it would overtake the reads: refused.
    auto* in_place = reinterpret_cast<float*>(overlap.data());
    CHECK_THROWS_WITH(ops::dropout_forward_bf16(overlap.data(), in_place, n, 0.1f, 99, key),
                      Catch::Contains("overlaps the input"));
  }
  if (!ops::cpu_has_bf16()) {
    WARN("skipped the products: no native bf16 matmul on this CPU");
    return;
  }
  const int64_t B = 2, S = 24, heads = 3, d = 16, H = heads * d;
  const auto qkv = random_vector(B * S * 3 * H, 42), probs = random_vector(B * heads * S * S, 43, 0.f, 1.f),
             dctx = random_vector(B * S * H, 44);
  std::vector<uint16_t> probs16(probs.size());
  for (size_t i = 0; i < probs.size(); ++i) probs16[i] = ops::to_bf16(probs[i]);
  const auto* p16 = reinterpret_cast<const float*>(probs16.data());
  std::vector<float> ctx(B * S * H), ctx16(B * S * H);
  ops::AttentionContext(B, S, heads, d, true).forward(ctx.data(), probs.data(), qkv.data());
  ops::AttentionContext(B, S, heads, d, true, false, false, true).forward(ctx16.data(), p16, qkv.data());
  CHECK(ctx16 == ctx);
  using K = ops::AttentionGrad::Kind;
  std::vector<float> dv(B * S * 3 * H, 0.f), dv16(B * S * 3 * H, 0.f);
  ops::AttentionGrad(K::context_v, B, S, heads, d, 1.f, true).forward(dv.data(), dctx.data(), probs.data());
  ops::AttentionGrad(K::context_v, B, S, heads, d, 1.f, true, 0, true).forward(dv16.data(), dctx.data(), p16);
  CHECK(dv16 == dv);
  CHECK(std::any_of(dv.begin(), dv.end(), [](float v) { return v != 0.f; }));
}

namespace {

BertConfig bf16_test_config() { return testing::bert_config(200, 64, 2, 4, 128, 64); }

RunSpec run_spec(RunMode mode, const std::string& precision) {
  RunSpec r;
  r.batch = 3, r.seq = 16, r.mode = mode, r.precision = precision_from_string(precision);
  r.dropout = false;
  return r;
}

// The fused training graph of bf16_test_config.
Graph train_graph(const std::string& precision) {
  Graph g = build_bert(bf16_test_config(), run_spec(RunMode::train, precision));
  apply_fusions(g);
  return g;
}

}  // namespace

TEST_CASE("bf16 inference: the GELU output goes from one FFN GEMM to the next in bf16", "[graph][bf16]") {
  const auto c = bf16_test_config();
  for (const char* precision : {"bf16", "fp32"})
    for (bool fused : {true, false}) {
      Graph g = build_bert(c, run_spec(RunMode::infer, precision));
      if (fused) apply_fusions(g);
      const auto handoff = bf16_linear_handoffs(g);
      std::vector<std::string> names;
      for (const auto& t : g.tensors())
        if (handoff.at(size_t(t.id))) names.push_back(t.name);
      INFO(precision << (fused ? " fused" : " unfused") << ": " << fmt::format("{}", fmt::join(names, ", ")));
      // Only with the GELU in the first GEMM's epilogue does one linear layer feed another
      // alone; the attention context feeds attention.output alone, fused or not.
      const bool bf16 = std::string(precision) == "bf16";
      // The fused qkv is read only by the attention products.
      size_t gelu = 0, context = 0, qkv = 0;
      for (const auto& n : names) {
        gelu += n.ends_with("ffn.gelu.out");  // the fused GELU's output
        context += n.ends_with("attention.context.out");
        qkv += n.ends_with("attention.qkv.out");
      }
      CHECK(gelu == (bf16 && fused ? size_t(c.num_hidden_layers) : 0));
      CHECK(context == (bf16 ? size_t(c.num_hidden_layers) : 0));
      CHECK(qkv == (bf16 ? size_t(c.num_hidden_layers) : 0));
      CHECK(gelu + context + qkv == names.size());
    }
}

TEST_CASE("bf16 training: every linear layer's dX and dW GEMMs share one cast of dy", "[graph][bf16]") {
  const auto c = bf16_test_config();
  for (const char* precision : {"bf16", "fp32"}) {
    const Graph g = train_graph(precision);
    const auto share = shared_dy_casts(g);
    REQUIRE(share.size() == g.nodes().size());
    // Found independently: each dW node's dy is read by exactly one dX node, earlier.
    int grad_weights = 0, pairs = 0;
    for (const auto& n : g.nodes()) {
      if (n.kind != OpKind::linear_grad_weight) {
        if (n.kind != OpKind::linear_grad_input) CHECK(share[size_t(n.id)] == 0);
        continue;
      }
      ++grad_weights;
      int partners = 0;
      for (const auto& m : g.nodes())
        partners += m.kind == OpKind::linear_grad_input && m.inputs[0] == n.inputs[0] && m.id < n.id;
      CHECK(partners == 1);
      pairs += share[size_t(n.id)];
    }
    INFO(precision);
    CHECK(grad_weights >= 4 * c.num_hidden_layers);
    CHECK(pairs == (std::string(precision) == "bf16" ? grad_weights : 0));
    int shared_inputs = 0;
    for (const auto& n : g.nodes()) shared_inputs += n.kind == OpKind::linear_grad_input && share[size_t(n.id)];
    CHECK(shared_inputs == pairs);
  }
}

TEST_CASE("bf16 training: attention backward GEMMs reuse the casts of dctx, dS, Q and K", "[graph][bf16]") {
  const auto c = bf16_test_config();
  for (const char* precision : {"bf16", "fp32"}) {
    const Graph g = train_graph(precision);
    const auto reuse = shared_attention_casts(g);
    REQUIRE(reuse.size() == g.nodes().size());
    std::map<std::pair<OpKind, int>, int> count;  // (kind, mask) -> nodes
    for (const auto& n : g.nodes())
      if (reuse[size_t(n.id)] != 0) ++count[{n.kind, reuse[size_t(n.id)]}];
    INFO(precision);
    if (std::string(precision) == "fp32") {
      CHECK(count.empty());
      continue;
    }
    // Per layer: dV reads dctx as dP's GEMM cast it; dQ reads K, dK reads dS and Q.
    const int L = int(c.num_hidden_layers);
    CHECK(count == std::map<std::pair<OpKind, int>, int>{{{OpKind::attn_scores_grad_q, 2}, L},
                                                         {{OpKind::attn_scores_grad_k, 3}, L},
                                                         {{OpKind::attn_context_grad_v, 1}, L}});
    // Each reader's writers, checked on the graph: the GEMM right before it reads the same
    // first input, and an attn_scores node of the same phase reads its qkv.
    const Node* prev = nullptr;
    const Node* scores = nullptr;
    for (const auto& n : g.nodes()) {
      if (!node_gemm(g, n)) continue;
      const int r = reuse[size_t(n.id)];
      if (r & 1) {
        REQUIRE(prev != nullptr);
        CHECK(prev->inputs[0] == n.inputs[0]);
        CHECK(prev->kind == (n.kind == OpKind::attn_context_grad_v ? OpKind::attn_context_grad_probs
                                                                     : OpKind::attn_scores_grad_q));
      }
      if (r & 2) {
        REQUIRE(scores != nullptr);
        CHECK(scores->inputs[0] == n.inputs[1]);
        CHECK(scores->phase == Phase::backward);  // the recomputation
      }
      if (n.kind == OpKind::attn_scores) scores = &n;
      prev = &n;
    }
  }
}

TEST_CASE("bf16 training: the attention dropouts hand their probabilities over in bf16", "[graph][bf16]") {
  const auto c = bf16_test_config();
  for (const char* precision : {"bf16", "fp32"}) {
    RunSpec r = run_spec(RunMode::train, precision);
    r.dropout = true;
    Graph g = build_bert(c, r);
    apply_fusions(g);
    const auto handoff = bf16_probs_handoffs(g);
    REQUIRE(handoff.size() == g.tensors().size());
    std::vector<std::string> names;
    for (const auto& t : g.tensors())
      if (handoff[size_t(t.id)]) names.push_back(t.name);
    INFO(precision << ": " << fmt::format("{}", fmt::join(names, ", ")));
    // The forward dropout's output (read by the context product) and its recomputation's (read
    // by dV and by the skipped context recomputation), per layer.
    CHECK(names.size() == (std::string(precision) == "bf16" ? size_t(2 * c.num_hidden_layers) : 0));
    for (const auto& n : names) CHECK_THAT(n, Catch::Contains("attention.dropout"));
    // Never placed over the f32 input it is computed from.
    const MemoryPlan plan = plan_memory(g, 64, handoff);
    for (const auto& n : g.nodes())
      if (handoff[size_t(n.outputs[0])]) CHECK(plan.offset[size_t(n.outputs[0])] != plan.offset[size_t(n.inputs[0])]);
  }
}

TEST_CASE("A bf16 run marks every GEMM node, forward and backward, and only those", "[graph][bf16]") {
  const auto c = bf16_test_config();
  for (const RunMode mode : {RunMode::infer, RunMode::train}) {
    Graph g = build_bert(c, run_spec(mode, "bf16"));
    apply_fusions(g);
    int gemms = 0, backward_gemms = 0;
    for (const auto& n : g.nodes()) {
      const bool gemm = node_gemm(g, n).has_value();
      CHECK(gemm_bf16(n) == gemm);
      gemms += gemm;
      backward_gemms += gemm && n.phase == Phase::backward;
    }
    CHECK(gemms >= 6 * c.num_hidden_layers);
    CHECK((mode == RunMode::train) == (backward_gemms > 0));
    CHECK(g.meta["run"]["precision"] == "bf16");
    // The attribute survives the JSON round trip.
    Graph back = graph_from_json(graph_to_json(g));
    for (const auto& n : back.nodes()) CHECK(gemm_bf16(n) == node_gemm(back, n).has_value());

    Graph f32 = build_bert(c, run_spec(mode, "fp32"));
    for (const auto& n : f32.nodes()) CHECK_FALSE(gemm_bf16(n));
  }
  // A precision is parsed where it enters; both spellings of f32 in files are accepted.
  CHECK_THROWS_WITH(run_spec(RunMode::infer, "fp16"), Catch::Matchers::Contains("fp16"));
  CHECK(precision_from_string("f32") == Precision::fp32);
  Graph g = build_bert(c, run_spec(RunMode::infer, "fp32"));
  auto& n = g.node(5);
  n.attrs["precision"] = "half";
  CHECK_THROWS_WITH(gemm_bf16(n), Catch::Matchers::Contains(n.name) && Catch::Matchers::Contains("precision"));
}

TEST_CASE("BERT inference and training in bf16 stay close to fp32", "[bf16][train]") {
  if (!ops::cpu_has_bf16()) {
    WARN("skipped: no native bf16 matmul on this CPU");
    return;
  }
  const auto c = bf16_test_config();
  const Model model = init_model(c, Heads::pretraining, 11);
  auto infer = [&](const std::string& precision) {
    Graph g = build_bert(c, run_spec(RunMode::infer, precision));
    apply_fusions(g);
    BertInputs in = synthetic_inputs(c, g);
    Executor ex(std::move(g), model.params);
    set_inputs(ex, in);
    ex.run();
    const float* y = ex.output("last_hidden_state");
    return std::vector<float>(y, y + numel(ex.output_shape("last_hidden_state")));
  };
  const auto y32 = infer("fp32"), y16 = infer("bf16");
  const double e = rel_error(y16, y32);
  fmt::print("  bf16 inference: last_hidden_state normwise error {:.2e} against fp32\n", e);
  CHECK(e > 1e-6);  // ran in bf16 (the fp32 runs are bit-identical to each other)
  CHECK(e <= 2e-2);

  // Ten AdamW steps on one fixed batch: the loss falls in both precisions and the curves stay
  // within a few percent of each other (master weights, gradients and moments stay f32).
  auto train = [&](const std::string& precision) {
    Model m = init_model(c, Heads::pretraining, 11);
    RunSpec r = run_spec(RunMode::train, precision);
    TrainStepper stepper(m, r, OptimizerConfig{}, 1);
    BertInputs batch = synthetic_inputs(c, stepper.executor().graph());
    std::vector<double> losses;
    for (int64_t step = 1; step <= 10; ++step)
      losses.push_back(stepper.step(std::span(&batch, 1), step, 3e-3f).loss());
    return losses;
  };
  const auto l32 = train("fp32"), l16 = train("bf16");
  for (size_t i = 0; i < l32.size(); ++i) {
    INFO("step " << i + 1 << ": fp32 loss " << l32[i] << ", bf16 " << l16[i]);
    CHECK(std::abs(l16[i] - l32[i]) <= 0.03 * l32[i]);
  }
  fmt::print("  bf16 training: loss {:.4f} -> {:.4f} (fp32 {:.4f} -> {:.4f})\n", l16.front(), l16.back(),
             l32.front(), l32.back());
  CHECK(l16.back() < 0.8 * l16.front());
  CHECK(l16 != l32);
}

TEST_CASE("bf16 training: a linear layer keeps its bf16 x for its dW GEMM instead of a recomputation",
          "[graph][bf16][train]") {
  const auto c = bf16_test_config();
  for (const char* precision : {"bf16", "fp32"}) {
    const Graph g = train_graph(precision);
    const auto kept = kept_x_casts(g);
    REQUIRE(kept.size() == g.nodes().size());
    int linears = 0, readers = 0, recomputations = 0;
    for (const auto& n : g.nodes()) {
      const KeptXCast& k = kept[size_t(n.id)];
      switch (k.role) {
        case KeptX::none: CHECK(k.linear == -1); break;
        case KeptX::keeps:
          ++linears;
          CHECK(k.linear == n.id);
          CHECK(n.kind == OpKind::linear);
          break;
        case KeptX::reads:  // the layer's dW GEMM, by autodiff's names
          ++readers;
          CHECK(n.name == g.node(k.linear).name + ".grad_weight");
          break;
        case KeptX::skipped:  // the node that wrote the dW GEMM's x, read by nothing else
          ++recomputations;
          CHECK(n.name.ends_with(".recompute"));
          CHECK(n.phase == Phase::backward);
          CHECK(kept[size_t(k.linear)].role == KeptX::keeps);
          break;
      }
    }
    INFO(precision);
    CHECK(linears == readers);
    CHECK(linears == recomputations);
    // qkv, attention.output (the recomputed context), ffn.intermediate (a recomputed layernorm)
    // and ffn.output (the recomputed GELU) in every layer.
    if (std::string(precision) == "bf16") CHECK(linears >= 4 * c.num_hidden_layers);
    else CHECK(linears == 0);
  }
  if (!ops::cpu_has_bf16()) {
    WARN("skipped the run: no native bf16 matmul on this CPU");
    return;
  }
  // The same gradients, bit for bit, with the keeping switched off by giving every such
  // recomputation a second reader (a graph output), so that it runs and the dW GEMM casts it.
  auto gradients = [&](bool keep) {
    Model m = init_model(c, Heads::pretraining, 11);
    Graph g = train_graph("bf16");
    if (!keep) {
      testing::keep_no_x_casts(g);
      const auto none = kept_x_casts(g);
      CHECK(std::all_of(none.begin(), none.end(), [](const KeptXCast& k) { return k.role == KeptX::none; }));
    }
    TrainingState state(m.params);
    const BertInputs in = synthetic_inputs(c, g);
    Executor ex(std::move(g), m.params, &state);
    set_inputs(ex, in);
    state.grads.zero();
    ex.run(nullptr, kForward | kBackward);
    return std::vector<float>(state.grads.arena(), state.grads.arena() + state.grads.arena_size());
  };
  const auto with = gradients(true), without = gradients(false);
  CHECK(std::any_of(with.begin(), with.end(), [](float v) { return v != 0.f; }));
  CHECK(with == without);
}

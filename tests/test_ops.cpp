// The ops of ops/ where the op-table loop (tests/test_op_table.cpp, which runs every op kind's
// fast path against its reference and its gradients against finite differences at several
// sizes) does not reach: the simple references against hand-computed values, the attention
// scores' switch between its two matmuls, the fused attention against the three ops it
// replaces, and the mask's exact zeros. Prints one error line per comparison.
#include <catch2/catch.hpp>
#include <omp.h>

#include "test_util.h"
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/bf16.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/peak.h"
#include "base/error.h"

using namespace bertlab;
using ops::Activation;

using bertlab::testing::random_vector;

namespace {

// Tolerances (normwise relative error, defined below).
// GEMMs: the references accumulate in double, oneDNN in fp32 with its own blocking order. The
// rounding error of a K-term fp32 dot product is bounded by about K * 2^-24 * sum|x_k w_k|;
// for K <= 100 and inputs in [-1, 1] that is a few 1e-6 of the largest output in the worst case
// (typically ~1e-7), so 1e-5 leaves margin without hiding a wrong index or a missing term
// (which would show up as errors of order 1e-1).
constexpr double kGemmTol = 1e-5;
// LayerNorm, softmax and the erf/tanh kernels: a handful of fp32 operations per element plus
// oneDNN's polynomial approximations of exp/erf/tanh (accurate to a few ulp): 1e-5 as well.
constexpr double kElementTol = 1e-5;

// Max abs error, and the normwise relative error max|got - ref| / max|ref|: element-wise
// relative errors are meaningless for GEMM outputs near zero, whose rounding error scales
// with the size of the terms summed, not with the (cancelled) result.
struct Errors {
  double max_abs = 0, max_rel = 0;
};

Errors compare(const std::string& name, const float* got, const float* ref, int64_t n, double tol) {
  Errors e;
  double ref_max = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(got[i]) && std::isfinite(ref[i]);
    e.max_abs = std::max(e.max_abs, std::abs(double(got[i]) - double(ref[i])));
    ref_max = std::max(ref_max, std::abs(double(ref[i])));
  }
  e.max_rel = ref_max > 0 ? e.max_abs / ref_max : e.max_abs;
  fmt::print("  {:<44} n {:>6}  max abs {:9.2e}  max rel {:9.2e}  (tol {:.0e})\n", name, n,
             e.max_abs, e.max_rel, tol);
  INFO(name << ": max abs " << e.max_abs << ", max rel " << e.max_rel << ", tol " << tol);
  CHECK(finite);
  CHECK(e.max_rel <= tol);
  return e;
}

Errors compare(const std::string& name, const std::vector<float>& got,
               const std::vector<float>& ref, double tol) {
  REQUIRE(got.size() == ref.size());
  return compare(name, got.data(), ref.data(), static_cast<int64_t>(ref.size()), tol);
}

// Reference values of the exact GELU, x * Phi(x), from the normal CDF tables.
constexpr double kPhiOf1 = 0.8413447460685429;

}  // namespace

TEST_CASE("Linear reference matches a hand-computed product", "[ops]") {
  // x (2,3), w (2,3) stored (N,K): y = x w^T + b.
  const float x[] = {1, 2, 3, -1, 0, 2}, w[] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, b[] = {0.25f, -1};
  const float residual[] = {1, 2, 3, 4};
  float y[4];
  ops::linear_forward_reference(y, x, w, b, nullptr, 2, 2, 3, Activation::none);
  CHECK(y[0] == 1 - 3 + 0.25f);
  CHECK(y[1] == 3 - 1);
  CHECK(y[2] == -1 - 2 + 0.25f);
  CHECK(y[3] == 0.5f - 1);
  ops::linear_forward_reference(y, x, w, b, residual, 2, 2, 3, Activation::tanh);
  CHECK(y[0] == Approx(std::tanh(-1.75) + 1).epsilon(1e-6));
  CHECK(y[3] == Approx(std::tanh(-0.5) + 4).epsilon(1e-6));
  // gelu(1) = Phi(1): x = [1], w = [1], no bias.
  const float one = 1;
  ops::linear_forward_reference(y, &one, &one, nullptr, nullptr, 1, 1, 1, Activation::gelu);
  CHECK(y[0] == Approx(kPhiOf1).epsilon(1e-6));
}

TEST_CASE("Attention scores switch between the matmuls with and without the bias on one object", "[ops]") {
  // No padding: an all-zero bias (with a -0, as (1 - mask) * -10000 gives) takes the matmul
  // without the bias post-op; then a bias again takes the one with it, on the same object.
  // (The op-table test checks the products at several sizes, always with a bias.)
  const int64_t B = 2, S = 13, heads = 3, d = 7, H = heads * d, n_scores = B * heads * S * S;
  const float scale = 1.f / std::sqrt(float(d));
  auto qkv = random_vector(B * S * 3 * H, 21);
  auto bias = random_vector(B * S, 22, -2.f, 0.f);  // broadcast per batch and key, not per query
  std::vector<float> zero(bias.size(), 0.f);
  zero[0] = -0.f;
  ops::AttentionScores scores(B, S, heads, d, scale);
  for (const auto* b : {&bias, &zero, &bias}) {
    std::vector<float> got(n_scores), ref(n_scores);
    scores.forward(got.data(), qkv.data(), b->data());
    ops::attn_scores_reference(ref.data(), qkv.data(), b->data(), B, S, heads, d, scale);
    compare(b == &zero ? "attn_scores unmasked" : "attn_scores with a bias", got, ref, kGemmTol);
  }
}

// ops::FusedAttention against the three ops run on the whole batch, bit for bit: sequences, or
// blocks of heads, shared among 1 to 3 threads; padded and unpadded sequences; probabilities
// over kBlockBytes per head (one head per block); in bf16 also a bf16 qkv and a bf16 context.
TEST_CASE("Fused attention equals scores, softmax and context run one after another", "[ops]") {
  struct Case {
    int64_t B, S, heads, d;
    int threads;
  };
  const int64_t big_s = 8 + static_cast<int64_t>(std::sqrt(double(ops::FusedAttention::kBlockBytes) / sizeof(float)));
  const int saved_threads = omp_get_max_threads();
  for (Case c : {Case{8, 16, 4, 8, 2}, Case{1, 13, 6, 7, 2}, Case{3, 40, 4, 16, 2}, Case{5, 9, 3, 5, 1},
                 Case{4, 20, 2, 8, 3}, Case{3, 20, 2, 8, 3}, Case{2, big_s, 2, 4, 2}}) {
    // Both on as many threads as the fused op shares its blocks among (the executor builds it
    // for the threads it runs on): oneDNN may split a small product's sum over its threads.
    omp_set_num_threads(c.threads);
    const int64_t H = c.heads * c.d, n_scores = c.B * c.heads * c.S * c.S;
    const float scale = 1.f / std::sqrt(float(c.d));
    auto qkv = random_vector(c.B * c.S * 3 * H, 61, -2.f, 2.f);
    std::vector<int32_t> mask(c.B * c.S, 1);  // every other sequence padded after its first third
    for (int64_t b = 1; b < c.B; b += 2)
      for (int64_t s = c.S / 3 + 1; s < c.S; ++s) mask[b * c.S + s] = 0;
    std::vector<float> bias(c.B * c.S);
    ops::mask_bias_forward(bias.data(), mask.data(), c.B * c.S);
    for (bool bf16 : {false, true}) {
      if (bf16 && !ops::cpu_has_bf16()) continue;
      for (bool handoff : bf16 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
        const std::string what = fmt::format("B{} S{} heads{} d{} threads {}{}{}", c.B, c.S, c.heads, c.d, c.threads,
                                             bf16 ? " bf16" : "", handoff ? " (bf16 qkv and ctx)" : "");
        INFO(what);
        std::vector<uint16_t> qkv16(qkv.size());
        for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = ops::to_bf16(qkv[i]);
        const float* in = handoff ? reinterpret_cast<const float*>(qkv16.data()) : qkv.data();
        std::vector<float> probs(n_scores), want(c.B * c.S * H), got(want.size(), -1.f);
        ops::AttentionScores(c.B, c.S, c.heads, c.d, scale, bf16, handoff).forward(probs.data(), in, bias.data());
        ops::Softmax(c.B * c.heads * c.S, c.S).forward(probs.data(), probs.data());
        ops::AttentionContext(c.B, c.S, c.heads, c.d, bf16, handoff, handoff).forward(want.data(), probs.data(), in);
        const ops::FusedAttention fused(c.B, c.S, c.heads, c.d, scale, bf16, handoff, handoff, c.threads);
        fused.forward(got.data(), in, bias.data());
        if (c.S == big_s) CHECK(fused.block_heads() == 1);
        if (c.B == 1) CHECK(fused.block_heads() < c.heads);  // one sequence: heads shared out
        // A bf16 context fills the first half of the buffers: compare those bytes. fp32 products
        // split among threads otherwise than whole (sequence, head) products per thread are
        // summed in another order by oneDNN's gemm:jit on the batch, so there only rounding.
        const size_t bytes = want.size() * (handoff ? sizeof(uint16_t) : sizeof(float));
        if (bf16 || (c.B * c.heads) % c.threads == 0)
          CHECK(std::memcmp(got.data(), want.data(), bytes) == 0);
        else
          compare("fused attention " + what, got, want, kGemmTol);
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

TEST_CASE("Attention references match hand-computed values", "[ops]") {
  // B=1, S=2, heads=1, d=2: qkv rows are [q | k | v].
  const float qkv[] = {1, 0, /*k*/ 1, 2, /*v*/ 10, 20,  //
                       0, 1, /*k*/ 3, 4, /*v*/ 30, 40};
  const float bias[] = {0, -1};
  float scores[4];
  ops::attn_scores_reference(scores, qkv, bias, 1, 2, 1, 2, 0.5f);
  // q0.k0 = 1, q0.k1 = 3, q1.k0 = 2, q1.k1 = 4; times 0.5, plus bias per key.
  CHECK(scores[0] == 0.5f);
  CHECK(scores[1] == 1.5f - 1);
  CHECK(scores[2] == 1.0f);
  CHECK(scores[3] == 2.0f - 1);
  const float probs[] = {0.25f, 0.75f, 1, 0};
  float ctx[4];
  ops::attn_context_reference(ctx, probs, qkv, 1, 2, 1, 2);
  CHECK(ctx[0] == 0.25f * 10 + 0.75f * 30);
  CHECK(ctx[1] == 0.25f * 20 + 0.75f * 40);
  CHECK(ctx[2] == 10);
  CHECK(ctx[3] == 20);
}

TEST_CASE("Masked keys get probability exactly zero", "[ops]") {
  const int64_t B = 2, S = 13, heads = 3, d = 7, H = heads * d;
  auto qkv = random_vector(B * S * 3 * H, 31, -4.f, 4.f);
  // Sequence 0 is full; sequence 1 is padded after 5 tokens.
  std::vector<int32_t> mask(B * S, 1);
  for (int64_t s = 5; s < S; ++s) mask[S + s] = 0;
  std::vector<float> bias(B * S);
  ops::mask_bias_forward(bias.data(), mask.data(), B * S);
  for (int64_t i = 0; i < B * S; ++i)
    CHECK(bias[i] == (mask[i] ? 0.f : std::numeric_limits<float>::lowest()));

  const int64_t n = B * heads * S * S;
  std::vector<float> scores(n), probs(n), ref_scores(n), ref_probs(n);
  ops::AttentionScores op(B, S, heads, d, 1.f / std::sqrt(float(d)));
  op.forward(scores.data(), qkv.data(), bias.data());
  ops::Softmax softmax(B * heads * S, S);
  softmax.forward(probs.data(), scores.data());
  ops::attn_scores_reference(ref_scores.data(), qkv.data(), bias.data(), B, S, heads, d,
                             1.f / std::sqrt(float(d)));
  ops::softmax_forward_reference(ref_probs.data(), ref_scores.data(), B * heads * S, S);
  compare("masked attention probabilities", probs, ref_probs, kElementTol);

  int zeros = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t row = ((b * heads + h) * S + i) * S;
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          sum += probs[row + j];
          if (!mask[b * S + j]) {
            CHECK(probs[row + j] == 0.f);
            CHECK(ref_probs[row + j] == 0.f);
            ++zeros;
          }
        }
        CHECK(sum == Approx(1.0).epsilon(1e-5));
      }
  CHECK(zeros == heads * S * 8);
}

TEST_CASE("A fully masked row gives finite, uniform probabilities", "[ops]") {
  // As in Hugging Face: every key gets the same bias, so softmax spreads evenly (no NaN).
  const int64_t S = 5, heads = 1, d = 3;
  auto qkv = random_vector(S * 3 * heads * d, 41);
  std::vector<int32_t> mask(S, 0);
  std::vector<float> bias(S), scores(S * S), probs(S * S);
  ops::mask_bias_forward(bias.data(), mask.data(), S);
  ops::AttentionScores(1, S, heads, d, 0.5f).forward(scores.data(), qkv.data(), bias.data());
  ops::Softmax(S, S).forward(probs.data(), scores.data());
  for (float p : probs) CHECK(p == Approx(1.0 / S).epsilon(1e-6));
}

TEST_CASE("LayerNorm reference matches a hand-computed 2x2 case", "[ops]") {
  // Row [1, 3]: mean 2, biased variance 1 -> [-1, 1]. Row [2, 2]: variance 0 -> beta.
  const float x[] = {1, 3, 2, 2}, gamma[] = {2, 0.5f}, beta[] = {0.5f, -1};
  const float eps = 1e-5f;
  const double rstd = 1 / std::sqrt(1 + double(eps));
  const float want[] = {float(-2 * rstd + 0.5), float(0.5 * rstd - 1), 0.5f, -1};
  float y[4];
  ops::layernorm_forward_reference(y, x, gamma, beta, 2, 2, eps);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == Approx(want[i]).epsilon(1e-7));
  ops::LayerNorm(2, 2, eps).forward(y, x, gamma, beta);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == Approx(want[i]).epsilon(1e-6));
}

TEST_CASE("Softmax reference and fast path match hand-computed values", "[ops]") {
  // softmax([0, d]) = [1, e^d] / (1 + e^d): 1/3 and 2/3 for d = ln 2. The second row shifts by
  // 1000, which must not overflow; 1000 + ln 2 is not exact in fp32, so its d is the difference
  // actually stored (exact: Sterbenz).
  const float ln2 = static_cast<float>(std::log(2.0));
  const float x[] = {0, ln2, 1000, 1000 + ln2};
  auto second = [&](int row) {
    const double d = double(x[2 * row + 1]) - double(x[2 * row]);
    return std::exp(d) / (1 + std::exp(d));
  };
  CHECK(second(0) == Approx(2.0 / 3).epsilon(1e-7));
  float y[4];
  ops::softmax_forward_reference(y, x, 2, 2);
  for (int r = 0; r < 2; ++r) {
    CHECK(y[2 * r] == Approx(1 - second(r)).epsilon(1e-6));
    CHECK(y[2 * r + 1] == Approx(second(r)).epsilon(1e-6));
  }
  ops::Softmax(2, 2).forward(y, x);
  for (int r = 0; r < 2; ++r) {
    CHECK(y[2 * r] == Approx(1 - second(r)).epsilon(1e-5));
    CHECK(y[2 * r + 1] == Approx(second(r)).epsilon(1e-5));
  }
  // In place (y aliases x), as the header allows.
  float z[] = {0, ln2};
  ops::Softmax(1, 2).forward(z, z);
  CHECK(z[0] == Approx(1.0 / 3).epsilon(1e-5));
  CHECK(z[1] == Approx(2.0 / 3).epsilon(1e-5));
}

TEST_CASE("Activation reference matches hand-computed values", "[ops]") {
  const float x[] = {0, 1, -1, 0.5f};
  float y[4];
  ops::activation_forward_reference(y, x, 4, Activation::gelu);
  CHECK(y[0] == 0.f);
  CHECK(y[1] == Approx(kPhiOf1).epsilon(1e-7));
  CHECK(y[2] == Approx(-(1 - kPhiOf1)).epsilon(1e-7));
  ops::activation_forward_reference(y, x, 4, Activation::tanh);
  CHECK(y[3] == Approx(0.46211715726000974).epsilon(1e-7));
  ops::activation_forward_reference(y, x, 4, Activation::none);
  CHECK(std::equal(x, x + 4, y));
  // SiLU x / (1 + e^-x): 1 / (1 + 1/e) = e / (e + 1) at 1; -1 / (1 + e) at -1. Its derivative at
  // 0 is 1/2 (s(0) = 1/2), at 1 s (1 + (1 - s)) with s = e / (e + 1).
  const double e = std::exp(1.0), s1 = e / (e + 1);
  ops::activation_forward_reference(y, x, 4, Activation::silu);
  CHECK(y[0] == 0.f);
  CHECK(y[1] == Approx(s1).epsilon(1e-7));
  CHECK(y[2] == Approx(-1 / (1 + e)).epsilon(1e-7));
  const float dy[] = {1, 1, 1, 1};
  ops::activation_backward_reference(y, dy, x, 2, Activation::silu);
  CHECK(y[0] == Approx(0.5).epsilon(1e-7));
  CHECK(y[1] == Approx(s1 * (2 - s1)).epsilon(1e-7));
  // The identity row has no kernel: an element-wise op of it is refused.
  CHECK_THROWS_AS(ops::ActivationOp(4, Activation::none), Error);
}

TEST_CASE("add reference matches a hand-computed sum", "[ops]") {
  const float a[] = {1.5f, -2}, b[] = {0.25f, 2};
  float y[2];
  ops::add_forward_reference(y, a, b, 2);
  CHECK(y[0] == 1.75f);
  CHECK(y[1] == 0.f);
}

TEST_CASE("Embedding reference matches a hand-computed sum", "[ops]") {
  // V=3, P=2, T=2, H=2; one sequence of two tokens.
  const float word[] = {0, 0, 1, 2, 10, 20}, pos[] = {100, 200, 300, 400},
              type[] = {0.5f, 0.25f, -1, -2};
  const int32_t ids[] = {2, 1}, types[] = {0, 1};
  float y[4];
  ops::embedding_forward_reference(y, ids, types, word, pos, type, 1, 2, 2);
  CHECK(y[0] == 10 + 100 + 0.5f);
  CHECK(y[1] == 20 + 200 + 0.25f);
  CHECK(y[2] == 1 + 300 - 1);
  CHECK(y[3] == 2 + 400 - 2);
}

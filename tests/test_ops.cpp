// Every op of ops/: the fast path (oneDNN or vectorised loops) against the plain reference on
// random data, on shapes that are not multiples of 16 and with a single row; the simple
// references themselves against hand-computed values. Prints one error line per case.
#include <catch2/catch.hpp>
#include <omp.h>

#include "test_util.h"
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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

using bertlab::testing::random_ids;
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
// add and embedding perform the same fp32 additions in the same order as their references:
// the results must be bit-identical.
constexpr double kExact = 0.0;


// Max abs error, and the normwise relative error max|got - ref| / max|ref|: element-wise
// relative errors are meaningless for GEMM outputs near zero, whose rounding error scales
// with the size of the terms summed, not with the (cancelled) result.
struct Errors {
  double max_abs = 0, max_rel = 0;
};

// `scale` (optional) raises the denominator to the magnitude the error is relative to, when
// that is not the output's own (see GELU below).
Errors compare(const std::string& name, const float* got, const float* ref, int64_t n, double tol,
               double scale = 0) {
  Errors e;
  double ref_max = scale;
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
               const std::vector<float>& ref, double tol, double scale = 0) {
  REQUIRE(got.size() == ref.size());
  return compare(name, got.data(), ref.data(), static_cast<int64_t>(ref.size()), tol, scale);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

const char* act_name(Activation a) { return ops::to_string(a); }

// Reference values of the exact GELU, x * Phi(x), from the normal CDF tables.
constexpr double kPhiOf1 = 0.8413447460685429;

}  // namespace

TEST_CASE("Linear: oneDNN matmul with epilogues equals the reference", "[ops]") {
  struct Dims {
    int64_t M, N, K;
  };
  for (Dims s : {Dims{37, 53, 29}, Dims{1, 53, 29}, Dims{37, 1, 100}, Dims{1, 1, 1}}) {
    for (Activation act : {Activation::none, Activation::gelu, Activation::tanh}) {
      for (bool residual : {false, true}) {
        auto x = random_vector(s.M * s.K, 1), w = random_vector(s.N * s.K, 2),
             b = random_vector(s.N, 3), r = random_vector(s.M * s.N, 4);
        std::vector<float> got(s.M * s.N), ref(s.M * s.N);
        ops::Linear lin(s.M, s.N, s.K, act, residual);
        lin.pack_weights(w.data());
        lin.forward(got.data(), x.data(), b.data(), residual ? r.data() : nullptr);
        ops::linear_forward_reference(ref.data(), x.data(), w.data(), b.data(),
                                      residual ? r.data() : nullptr, s.M, s.N, s.K, act);
        // GELU's error is relative to its input (see the activation test): scale by max|xw+b|.
        double scale = 0;
        if (act == Activation::gelu) {
          std::vector<float> pre(s.M * s.N);
          ops::linear_forward_reference(pre.data(), x.data(), w.data(), b.data(), nullptr, s.M, s.N,
                                        s.K, Activation::none);
          scale = max_abs(pre);
        }
        compare(fmt::format("linear M{} N{} K{} {}{}", s.M, s.N, s.K, act_name(act),
                            residual ? " +residual" : ""),
                got, ref, kGemmTol, scale);
      }
    }
  }
}

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

TEST_CASE("Linear::pack_weights re-reads changed weights", "[ops]") {
  const int64_t M = 37, N = 53, K = 29;
  auto x = random_vector(M * K, 11), w = random_vector(N * K, 12), b = random_vector(N, 13);
  std::vector<float> got(M * N), ref(M * N);
  ops::Linear lin(M, N, K, Activation::gelu, false);
  lin.pack_weights(w.data());
  lin.forward(got.data(), x.data(), b.data(), nullptr);
  ops::linear_forward_reference(ref.data(), x.data(), w.data(), b.data(), nullptr, M, N, K,
                                Activation::gelu);
  compare("linear packed w1", got, ref, kGemmTol);
  const std::vector<float> before = got;

  // Change w in place: the packed copy is stale until pack_weights runs again.
  auto w2 = random_vector(N * K, 14);
  std::copy(w2.begin(), w2.end(), w.begin());
  lin.forward(got.data(), x.data(), b.data(), nullptr);
  CHECK(got == before);

  lin.pack_weights(w.data());
  lin.forward(got.data(), x.data(), b.data(), nullptr);
  ops::linear_forward_reference(ref.data(), x.data(), w.data(), b.data(), nullptr, M, N, K,
                                Activation::gelu);
  compare("linear repacked w2", got, ref, kGemmTol);
  CHECK(got != before);
}

TEST_CASE("Attention scores and context equal the references", "[ops]") {
  struct Dims {
    int64_t B, S, heads, d;
  };
  for (Dims s : {Dims{2, 13, 3, 7}, Dims{1, 1, 3, 7}, Dims{3, 5, 1, 1}}) {
    const int64_t H = s.heads * s.d;
    const float scale = 1.f / std::sqrt(float(s.d));
    auto qkv = random_vector(s.B * s.S * 3 * H, 21);
    // An ordinary additive bias here (the -inf-ish mask bias is tested below): it checks that
    // the bias is broadcast per batch and key, not per query.
    auto bias = random_vector(s.B * s.S, 22, -2.f, 0.f);
    const int64_t n_scores = s.B * s.heads * s.S * s.S;
    std::vector<float> got(n_scores), ref(n_scores);
    ops::AttentionScores scores(s.B, s.S, s.heads, s.d, scale);
    scores.forward(got.data(), qkv.data(), bias.data());
    ops::attn_scores_reference(ref.data(), qkv.data(), bias.data(), s.B, s.S, s.heads, s.d, scale);
    compare(fmt::format("attn_scores B{} S{} heads{} d{}", s.B, s.S, s.heads, s.d), got, ref,
            kGemmTol);
    // No padding: an all-zero bias (with a -0, as (1 - mask) * -10000 gives) takes the matmul
    // without the bias post-op; then a bias again takes the one with it, on the same object.
    std::vector<float> zero(bias.size(), 0.f), got0(n_scores), ref0(n_scores), again(n_scores);
    zero[0] = -0.f;
    scores.forward(got0.data(), qkv.data(), zero.data());
    ops::attn_scores_reference(ref0.data(), qkv.data(), zero.data(), s.B, s.S, s.heads, s.d, scale);
    compare(fmt::format("attn_scores unmasked B{} S{}", s.B, s.S), got0, ref0, kGemmTol);
    scores.forward(again.data(), qkv.data(), bias.data());
    CHECK(again == got);

    // Probabilities: any rows summing to one will do; use the softmax of the scores.
    std::vector<float> probs(n_scores);
    ops::softmax_forward_reference(probs.data(), ref.data(), s.B * s.heads * s.S, s.S);
    std::vector<float> ctx(s.B * s.S * H), ctx_ref(s.B * s.S * H);
    ops::AttentionContext context(s.B, s.S, s.heads, s.d);
    context.forward(ctx.data(), probs.data(), qkv.data());
    ops::attn_context_reference(ctx_ref.data(), probs.data(), qkv.data(), s.B, s.S, s.heads, s.d);
    compare(fmt::format("attn_context B{} S{} heads{} d{}", s.B, s.S, s.heads, s.d), ctx, ctx_ref,
            kGemmTol);
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

TEST_CASE("LayerNorm: oneDNN equals the reference", "[ops]") {
  struct Dims {
    int64_t rows, H;
  };
  for (Dims s : {Dims{37, 53}, Dims{1, 53}, Dims{37, 1}}) {
    for (float eps : {1e-12f, 1e-5f}) {
      // An offset and a spread unlike N(0,1), so the mean and variance both matter.
      auto x = random_vector(s.rows * s.H, 51, -3.f, 5.f);
      auto gamma = random_vector(s.H, 52, 0.5f, 1.5f), beta = random_vector(s.H, 53);
      std::vector<float> got(s.rows * s.H), ref(s.rows * s.H);
      ops::LayerNorm(s.rows, s.H, eps).forward(got.data(), x.data(), gamma.data(), beta.data());
      ops::layernorm_forward_reference(ref.data(), x.data(), gamma.data(), beta.data(), s.rows, s.H,
                                       eps);
      compare(fmt::format("layernorm rows{} H{} eps {:g}", s.rows, s.H, eps), got, ref,
              kElementTol);
    }
  }
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

TEST_CASE("Softmax: oneDNN equals the reference", "[ops]") {
  struct Dims {
    int64_t rows, L;
  };
  for (Dims s : {Dims{37, 53}, Dims{1, 53}, Dims{37, 1}, Dims{1, 13}}) {
    auto x = random_vector(s.rows * s.L, 61, -8.f, 8.f);
    std::vector<float> got(s.rows * s.L), ref(s.rows * s.L);
    ops::Softmax(s.rows, s.L).forward(got.data(), x.data());
    ops::softmax_forward_reference(ref.data(), x.data(), s.rows, s.L);
    compare(fmt::format("softmax rows{} L{}", s.rows, s.L), got, ref, kElementTol);
  }
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

TEST_CASE("ActivationOp of every activation equals the reference", "[ops]") {
  for (const auto& row : ops::kActivations) {
    const Activation act = row.act;
    if (act == Activation::none) continue;
    for (int64_t n : {int64_t{37 * 53}, int64_t{1}}) {
      auto x = random_vector(n, 71, -6.f, 6.f);
      std::vector<float> got(n), ref(n);
      ops::ActivationOp(n, act).forward(got.data(), x.data());
      ops::activation_forward_reference(ref.data(), x.data(), n, act);
      // fp32 GELU evaluates x/2 * (1 + erf(x/sqrt 2)) and SiLU x * sigmoid(x), both x times a
      // factor near 0 for negative x; the factor's error is ~2^-24 of 1, so the result's is of
      // |x|, not of the (small) result: measure it against max|x| (the rated, transcendental rows).
      const double scale = row.rated ? max_abs(x) : 0;
      compare(fmt::format("activation {} n{}", act_name(act), n), got, ref, kElementTol, scale);
    }
  }
  CHECK_THROWS_AS(ops::ActivationOp(4, Activation::none), Error);
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
}

TEST_CASE("add_forward equals the reference bit for bit", "[ops]") {
  for (int64_t n : {int64_t{37 * 53}, int64_t{1}}) {
    auto a = random_vector(n, 81), b = random_vector(n, 82);
    std::vector<float> got(n), ref(n);
    ops::add_forward(got.data(), a.data(), b.data(), n);
    ops::add_forward_reference(ref.data(), a.data(), b.data(), n);
    compare(fmt::format("add n{}", n), got, ref, kExact);
  }
  const float a[] = {1.5f, -2}, b[] = {0.25f, 2};
  float y[2];
  ops::add_forward_reference(y, a, b, 2);
  CHECK(y[0] == 1.75f);
  CHECK(y[1] == 0.f);
}

TEST_CASE("embedding_forward equals the reference bit for bit", "[ops]") {
  const int64_t V = 29, P = 17, T = 3, H = 53;
  auto word = random_vector(V * H, 91), pos = random_vector(P * H, 92),
       type = random_vector(T * H, 93);
  struct Dims {
    int64_t B, S;
  };
  for (Dims s : {Dims{2, 13}, Dims{1, 1}, Dims{3, P}}) {
    auto ids = random_ids(s.B * s.S, V, 94), types = random_ids(s.B * s.S, T, 95);
    std::vector<float> got(s.B * s.S * H), ref(s.B * s.S * H);
    ops::embedding_forward(got.data(), ids.data(), types.data(), word.data(), pos.data(),
                           type.data(), s.B, s.S, H);
    ops::embedding_forward_reference(ref.data(), ids.data(), types.data(), word.data(), pos.data(),
                                     type.data(), s.B, s.S, H);
    compare(fmt::format("embedding B{} S{} H{}", s.B, s.S, H), got, ref, kExact);
  }
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

TEST_CASE("mask_bias_forward and first_token_forward follow their definitions", "[ops]") {
  // Both are plain loops with no separate reference: check them against the definition.
  for (int64_t n : {int64_t{13}, int64_t{1}}) {
    std::vector<int32_t> mask(n);
    for (int64_t i = 0; i < n; ++i) mask[i] = (i * 7 + 3) % 5 != 0;
    std::vector<float> bias(n, 123.f);
    ops::mask_bias_forward(bias.data(), mask.data(), n);
    for (int64_t i = 0; i < n; ++i)
      CHECK(bias[i] == (mask[i] ? 0.f : std::numeric_limits<float>::lowest()));
  }
  struct Dims {
    int64_t B, S, H;
  };
  for (Dims s : {Dims{3, 13, 53}, Dims{1, 1, 1}, Dims{1, 13, 53}}) {
    auto x = random_vector(s.B * s.S * s.H, 101);
    std::vector<float> y(s.B * s.H, -7.f);
    ops::first_token_forward(y.data(), x.data(), s.B, s.S, s.H);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t i = 0; i < s.H; ++i) CHECK(y[b * s.H + i] == x[b * s.S * s.H + i]);
  }
}

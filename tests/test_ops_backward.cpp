// Every backward kernel of ops/, checked two ways:
//  1. the fast path against its *_reference on shapes that are not multiples of 16 and with a
//     single row (gradients that accumulate are pre-filled, so `+=` is checked too);
//  2. the reference against central finite differences taken in double: for a scalar loss
//     L = sum(dy * forward(x)) with a random dy, the analytic gradient of every input must match
//     (L(x + h e_i) - L(x - h e_i)) / 2h on a sample of coordinates. The forwards used for the
//     differences are small double helpers below, each first checked against the op's own
//     forward reference so that they model the same function.
// Prints one error line per comparison.
#include <catch2/catch.hpp>

#include "test_util.h"
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/optimizer.h"

using namespace bertlab;
using ops::Activation;

using bertlab::testing::random_ids;
using bertlab::testing::random_vector;

namespace {

// Fast vs reference (normwise relative error): the references accumulate in double, the fast
// paths in fp32 with their own order; a K-term fp32 sum errs by about K * 2^-24 of the largest
// term, a few 1e-6 for the sizes here, so 1e-5 leaves margin without hiding a wrong index.
constexpr double kFastTol = 1e-5;
// Reference vs finite differences: the analytic gradient is rounded to float (~6e-8 relative),
// the differences in double with h = 1e-5 err by ~1e-10 (truncation h^2 f'''/6, rounding
// 1e-16 L / h); 1e-5 is two orders above the float rounding.
constexpr double kFdTol = 1e-5;
constexpr double kFdStep = 1e-5;
// A double helper forward must agree with the op's float forward reference to float rounding.
constexpr double kModelTol = 1e-6;
// Optimizer: one fp32 update of values of order 1; the reference rounds the same stored moments.
constexpr double kOptTol = 1e-6;
constexpr int kFdSamples = 24;


std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Normwise relative error max|got - ref| / max|ref|, printed and checked against tol.
double compare(const std::string& name, const float* got, const float* ref, int64_t n, double tol) {
  double max_abs = 0, ref_max = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(got[i]) && std::isfinite(ref[i]);
    max_abs = std::max(max_abs, std::abs(double(got[i]) - double(ref[i])));
    ref_max = std::max(ref_max, std::abs(double(ref[i])));
  }
  const double rel = ref_max > 0 ? max_abs / ref_max : max_abs;
  fmt::print("  {:<52} n {:>6}  max abs {:9.2e}  max rel {:9.2e}  (tol {:.0e})\n", name, n, max_abs,
             rel, tol);
  INFO(name << ": max abs " << max_abs << ", max rel " << rel << ", tol " << tol);
  CHECK(finite);
  CHECK(rel <= tol);
  return rel;
}

double compare(const std::string& name, const std::vector<float>& got, const std::vector<float>& ref,
               double tol) {
  REQUIRE(got.size() == ref.size());
  return compare(name, got.data(), ref.data(), static_cast<int64_t>(ref.size()), tol);
}

// The same for a double model against a float op.
void compare_model(const std::string& name, const std::vector<double>& model,
                   const std::vector<float>& op) {
  std::vector<float> m(model.begin(), model.end());
  compare(name + " (double model vs op fwd)", m, op, kModelTol);
}

void check_bit_identical(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  int64_t diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &ref[i], sizeof(float)) != 0;
  fmt::print("  {:<52} n {:>6}  differing elements {} (must be bit-identical)\n", name, got.size(),
             diff);
  INFO(name << ": " << diff << " elements differ");
  CHECK(diff == 0);
}

// Central differences of `loss` over a sample of the coordinates of x (perturbed in place and
// restored), against the analytic gradient; normwise relative error over the sample.
double fd_check(const std::string& name, std::vector<double>& x, const std::vector<float>& analytic,
                const std::function<double()>& loss, uint32_t seed) {
  REQUIRE(x.size() == analytic.size());
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<int64_t> idx;
  if (n <= kFdSamples) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> dist(0, n - 1);
    idx = {0, n - 1};
    while (int64_t(idx.size()) < kFdSamples) idx.push_back(dist(rng));
  }
  double max_abs = 0, fd_max = 0;
  for (int64_t i : idx) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = loss();
    x[i] = x0 - kFdStep;
    const double lm = loss();
    x[i] = x0;
    const double fd = (lp - lm) / (2 * kFdStep);
    max_abs = std::max(max_abs, std::abs(fd - double(analytic[i])));
    fd_max = std::max(fd_max, std::abs(fd));
  }
  const double rel = fd_max > 0 ? max_abs / fd_max : max_abs;
  fmt::print("  {:<52} {:>3} of {:>5}  max abs {:9.2e}  max rel {:9.2e}  (tol {:.0e})\n",
             name + " ref vs FD", idx.size(), n, max_abs, rel, kFdTol);
  INFO(name << " vs finite differences: max abs " << max_abs << ", max rel " << rel);
  CHECK(std::isfinite(rel));
  CHECK(rel <= kFdTol);
  return rel;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- Double forwards used for the finite differences ----

// y (M,N) = x (M,K) w^T + b, w (N,K)
std::vector<double> linear_fwd(const std::vector<double>& x, const std::vector<double>& w,
                               const std::vector<double>& b, int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = b[j];
      for (int64_t k = 0; k < K; ++k) acc += x[i * K + k] * w[j * K + k];
      y[i * N + j] = acc;
    }
  return y;
}

struct AttnDims {
  int64_t B, S, heads, d;
};

// scores (B,heads,S,S) = Q K^T * scale on qkv (B,S,3H)
std::vector<double> scores_fwd(const std::vector<double>& qkv, AttnDims a, double scale) {
  const int64_t H = a.heads * a.d, row = 3 * H;
  std::vector<double> s(a.B * a.heads * a.S * a.S);
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.S; ++i)
        for (int64_t j = 0; j < a.S; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < a.d; ++c)
            acc += qkv[(b * a.S + i) * row + h * a.d + c] * qkv[(b * a.S + j) * row + H + h * a.d + c];
          s[((b * a.heads + h) * a.S + i) * a.S + j] = acc * scale;
        }
  return s;
}

// ctx (B,S,H) = P V
std::vector<double> context_fwd(const std::vector<double>& probs, const std::vector<double>& qkv,
                                AttnDims a) {
  const int64_t H = a.heads * a.d, row = 3 * H;
  std::vector<double> ctx(a.B * a.S * H);
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.S; ++i)
        for (int64_t c = 0; c < a.d; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < a.S; ++j)
            acc += probs[((b * a.heads + h) * a.S + i) * a.S + j] *
                   qkv[(b * a.S + j) * row + 2 * H + h * a.d + c];
          ctx[(b * a.S + i) * H + h * a.d + c] = acc;
        }
  return ctx;
}

std::vector<double> layernorm_fwd(const std::vector<double>& x, const std::vector<double>& gamma,
                                  const std::vector<double>& beta, int64_t rows, int64_t H, double eps) {
  std::vector<double> y(rows * H);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < H; ++i) mean += x[r * H + i];
    mean /= H;
    for (int64_t i = 0; i < H; ++i) var += (x[r * H + i] - mean) * (x[r * H + i] - mean);
    var /= H;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < H; ++i) y[r * H + i] = (x[r * H + i] - mean) * rstd * gamma[i] + beta[i];
  }
  return y;
}

std::vector<double> softmax_fwd(const std::vector<double>& x, int64_t rows, int64_t L) {
  std::vector<double> y(rows * L);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = *std::max_element(x.begin() + r * L, x.begin() + (r + 1) * L), sum = 0;
    for (int64_t i = 0; i < L; ++i) sum += std::exp(x[r * L + i] - mx);
    for (int64_t i = 0; i < L; ++i) y[r * L + i] = std::exp(x[r * L + i] - mx) / sum;
  }
  return y;
}

std::vector<double> activation_fwd(const std::vector<double>& x, Activation act) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = act == Activation::gelu ? 0.5 * x[i] * (1.0 + std::erf(x[i] / std::sqrt(2.0)))
                                   : std::tanh(x[i]);
  return y;
}

// out (B,S,H) = word[ids] + pos[s] + type[type_ids]
std::vector<double> embedding_fwd(const std::vector<double>& word, const std::vector<double>& pos,
                                  const std::vector<double>& type, const std::vector<int32_t>& ids,
                                  const std::vector<int32_t>& type_ids, int64_t B, int64_t S,
                                  int64_t H) {
  std::vector<double> out(B * S * H);
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t c = 0; c < H; ++c)
      out[t * H + c] = word[ids[t] * H + c] + pos[(t % S) * H + c] + type[type_ids[t] * H + c];
  return out;
}

// sum over labelled rows of -log softmax(logits)[label]
double cross_entropy_fwd(const std::vector<double>& logits, const std::vector<int32_t>& labels,
                         int64_t N, int64_t C) {
  double loss = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (labels[r] == ops::kIgnoreLabel) continue;
    double mx = *std::max_element(logits.begin() + r * C, logits.begin() + (r + 1) * C), sum = 0;
    for (int64_t i = 0; i < C; ++i) sum += std::exp(logits[r * C + i] - mx);
    loss += std::log(sum) + mx - logits[r * C + labels[r]];
  }
  return loss;
}

}  // namespace

TEST_CASE("Linear backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  struct Dims {
    int64_t M, N, K;
  };
  for (Dims s : {Dims{37, 53, 29}, Dims{1, 53, 29}, Dims{19, 1, 45}, Dims{1, 1, 1}, Dims{70, 96, 160}}) {
    const std::string tag = fmt::format("M{} N{} K{}", s.M, s.N, s.K);
    auto x = random_vector(s.M * s.K, 1), w = random_vector(s.N * s.K, 2), b = random_vector(s.N, 3);
    auto dy = random_vector(s.M * s.N, 4);

    // Fast vs reference, with B read in place and packed (the B operand reordered into the
    // layout the matmul picks); dw/db pre-filled so accumulation is compared too.
    std::vector<float> dx_ref(s.M * s.K);
    ops::linear_grad_input_reference(dx_ref.data(), dy.data(), w.data(), s.M, s.N, s.K);
    const auto dw0 = random_vector(s.N * s.K, 5), db0 = random_vector(s.N, 6);
    auto dw_ref = dw0, db_ref = db0;
    ops::linear_grad_weight_reference(dw_ref.data(), db_ref.data(), dy.data(), x.data(), s.M, s.N, s.K);
    for (bool pack : {false, true}) {
      const std::string how = tag + (pack ? " packed B" : " B in place");
      std::vector<float> dx(s.M * s.K);
      ops::LinearGradInput grad_input(s.M, s.N, s.K, false, false, pack);
      grad_input.forward(dx.data(), dy.data(), w.data());
      compare("linear_grad_input " + how, dx, dx_ref, kFastTol);
      CHECK((grad_input.weight_copy_bytes() > 0) == pack);
      if (pack) {  // a kept copy (gradient accumulation) gives the same dx, bit for bit
        std::vector<std::byte> copy(grad_input.weight_copy_bytes());
        grad_input.cast_weights_into(w.data(), copy.data());
        std::vector<float> dx_kept(s.M * s.K);
        grad_input.forward_cast(dx_kept.data(), dy.data(), copy.data());
        CHECK(dx_kept == dx);
      }
      auto dw = dw0, db = db0;
      ops::LinearGradWeight(s.M, s.N, s.K, false, false, pack).forward(dw.data(), db.data(), dy.data(), x.data());
      compare("linear_grad_weight dw (+= prefilled) " + how, dw, dw_ref, kFastTol);
      compare("linear_grad_weight db (+= prefilled) " + how, db, db_ref, kFastTol);
    }

    // The reference from zero, for the finite differences; and ref(prefilled) - prefill == it.
    std::vector<float> gw(s.N * s.K, 0.f), gb(s.N, 0.f);
    ops::linear_grad_weight_reference(gw.data(), gb.data(), dy.data(), x.data(), s.M, s.N, s.K);
    std::vector<float> acc_w(gw.size()), acc_b(gb.size());
    for (size_t i = 0; i < gw.size(); ++i) acc_w[i] = dw_ref[i] - dw0[i];
    for (size_t i = 0; i < gb.size(); ++i) acc_b[i] = db_ref[i] - db0[i];
    compare("linear_grad_weight_reference accumulates dw " + tag, acc_w, gw, kFastTol);
    compare("linear_grad_weight_reference accumulates db " + tag, acc_b, gb, kFastTol);

    auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
    std::vector<float> y_op(s.M * s.N);
    ops::linear_forward_reference(y_op.data(), x.data(), w.data(), b.data(), nullptr, s.M, s.N, s.K,
                                  Activation::none);
    compare_model("linear " + tag, linear_fwd(xd, wd, bd, s.M, s.N, s.K), y_op);
    auto loss = [&] { return dot(dyd, linear_fwd(xd, wd, bd, s.M, s.N, s.K)); };
    fd_check("linear dx " + tag, xd, dx_ref, loss, 11);
    fd_check("linear dw " + tag, wd, gw, loss, 12);
    fd_check("linear db " + tag, bd, gb, loss, 13);
  }
}

TEST_CASE("Attention backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  using Kind = ops::AttentionGrad::Kind;
  for (AttnDims a : {AttnDims{2, 7, 3, 5}, AttnDims{1, 1, 2, 3}, AttnDims{1, 19, 2, 17}}) {
    const std::string tag = fmt::format("B{} S{} heads{} d{}", a.B, a.S, a.heads, a.d);
    const int64_t H = a.heads * a.d, n_qkv = a.B * a.S * 3 * H, n_sc = a.B * a.heads * a.S * a.S;
    const float scale = 1.f / std::sqrt(float(a.d));
    auto qkv = random_vector(n_qkv, 21), dscores = random_vector(n_sc, 22);
    auto dctx = random_vector(a.B * a.S * H, 23);
    std::vector<float> probs(n_sc);
    {
      auto logits = random_vector(n_sc, 24, -2.f, 2.f);
      ops::softmax_forward_reference(probs.data(), logits.data(), a.B * a.heads * a.S, a.S);
    }
    // Pre-filled outputs: each kind must write its own third of dqkv and nothing else.
    const auto fill = random_vector(n_qkv, 25, 5.f, 6.f);

    struct Case {
      Kind kind;
      const char* name;
    };
    for (Case c : {Case{Kind::scores_q, "scores_q"}, Case{Kind::scores_k, "scores_k"},
                   Case{Kind::context_v, "context_v"}}) {
      auto got = fill, ref = fill;
      ops::AttentionGrad op(c.kind, a.B, a.S, a.heads, a.d, scale);
      if (c.kind == Kind::context_v) {
        op.forward(got.data(), dctx.data(), probs.data());
        ops::attn_context_grad_v_reference(ref.data(), dctx.data(), probs.data(), a.B, a.S, a.heads, a.d);
      } else {
        op.forward(got.data(), dscores.data(), qkv.data());
        ops::attn_scores_grad_reference(ref.data(), dscores.data(), qkv.data(), a.B, a.S, a.heads,
                                        a.d, scale,
                                        c.kind == Kind::scores_q ? ops::QkvSlot::q : ops::QkvSlot::k);
      }
      compare(fmt::format("attn grad {} (whole dqkv) {}", c.name, tag), got, ref, kFastTol);
    }
    {
      std::vector<float> got(n_sc), ref(n_sc);
      ops::AttentionGrad(Kind::context_probs, a.B, a.S, a.heads, a.d, scale)
          .forward(got.data(), dctx.data(), qkv.data());
      ops::attn_context_grad_probs_reference(ref.data(), dctx.data(), qkv.data(), a.B, a.S, a.heads, a.d);
      compare("attn grad context_probs " + tag, got, ref, kFastTol);
    }

    // Finite differences of L = sum dS * scores(qkv) over all of qkv (the V third must be 0).
    std::vector<float> dqkv_scores(n_qkv, 0.f);
    ops::attn_scores_grad_reference(dqkv_scores.data(), dscores.data(), qkv.data(), a.B, a.S,
                                    a.heads, a.d, scale, ops::QkvSlot::q);
    ops::attn_scores_grad_reference(dqkv_scores.data(), dscores.data(), qkv.data(), a.B, a.S,
                                    a.heads, a.d, scale, ops::QkvSlot::k);
    auto qkvd = to_double(qkv), dsd = to_double(dscores), dctxd = to_double(dctx),
         probsd = to_double(probs);
    {
      std::vector<float> zero_bias(a.B * a.S, 0.f), s_op(n_sc);
      ops::attn_scores_reference(s_op.data(), qkv.data(), zero_bias.data(), a.B, a.S, a.heads, a.d,
                                 scale);
      compare_model("attn scores " + tag, scores_fwd(qkvd, a, scale), s_op);
      std::vector<float> c_op(a.B * a.S * H);
      ops::attn_context_reference(c_op.data(), probs.data(), qkv.data(), a.B, a.S, a.heads, a.d);
      compare_model("attn context " + tag, context_fwd(probsd, qkvd, a), c_op);
    }
    fd_check("attn scores dqkv (Q,K; V=0) " + tag, qkvd, dqkv_scores,
             [&] { return dot(dsd, scores_fwd(qkvd, a, scale)); }, 31);

    // L = sum dctx * (P V): dP and the V third of dqkv (Q and K thirds 0).
    std::vector<float> dprobs(n_sc), dqkv_ctx(n_qkv, 0.f);
    ops::attn_context_grad_probs_reference(dprobs.data(), dctx.data(), qkv.data(), a.B, a.S, a.heads, a.d);
    ops::attn_context_grad_v_reference(dqkv_ctx.data(), dctx.data(), probs.data(), a.B, a.S, a.heads, a.d);
    auto ctx_loss = [&] { return dot(dctxd, context_fwd(probsd, qkvd, a)); };
    fd_check("attn context dprobs " + tag, probsd, dprobs, ctx_loss, 32);
    fd_check("attn context dqkv (V; Q,K=0) " + tag, qkvd, dqkv_ctx, ctx_loss, 33);
  }
}

TEST_CASE("LayerNorm backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  const float eps = 1e-5f;
  struct Dims {
    int64_t rows, H;
  };
  for (Dims s : {Dims{37, 45}, Dims{1, 45}, Dims{5, 3}, Dims{130, 19}}) {
    const std::string tag = fmt::format("rows{} H{}", s.rows, s.H);
    auto x = random_vector(s.rows * s.H, 41, -2.f, 2.f), dy = random_vector(s.rows * s.H, 42);
    auto gamma = random_vector(s.H, 43, 0.5f, 1.5f), beta = random_vector(s.H, 44);
    const auto dg0 = random_vector(s.H, 45), db0 = random_vector(s.H, 46);

    std::vector<float> dx(s.rows * s.H), dx_ref(s.rows * s.H);
    auto dg = dg0, db = db0, dg_ref = dg0, db_ref = db0;
    ops::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), s.rows,
                            s.H, eps);
    ops::layernorm_backward_reference(dx_ref.data(), dg_ref.data(), db_ref.data(), dy.data(), x.data(),
                                      gamma.data(), s.rows, s.H, eps);
    compare("layernorm_backward dx " + tag, dx, dx_ref, kFastTol);
    compare("layernorm_backward dgamma (+= prefilled) " + tag, dg, dg_ref, kFastTol);
    compare("layernorm_backward dbeta (+= prefilled) " + tag, db, db_ref, kFastTol);

    std::vector<float> gx(s.rows * s.H), gg(s.H, 0.f), gb(s.H, 0.f);
    ops::layernorm_backward_reference(gx.data(), gg.data(), gb.data(), dy.data(), x.data(),
                                      gamma.data(), s.rows, s.H, eps);
    auto xd = to_double(x), gd = to_double(gamma), bd = to_double(beta), dyd = to_double(dy);
    std::vector<float> y_op(s.rows * s.H);
    ops::layernorm_forward_reference(y_op.data(), x.data(), gamma.data(), beta.data(), s.rows, s.H, eps);
    compare_model("layernorm " + tag, layernorm_fwd(xd, gd, bd, s.rows, s.H, eps), y_op);
    auto loss = [&] { return dot(dyd, layernorm_fwd(xd, gd, bd, s.rows, s.H, eps)); };
    fd_check("layernorm dx " + tag, xd, gx, loss, 47);
    fd_check("layernorm dgamma " + tag, gd, gg, loss, 48);
    fd_check("layernorm dbeta " + tag, bd, gb, loss, 49);
  }
}

TEST_CASE("Softmax backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  struct Dims {
    int64_t rows, L;
  };
  for (Dims s : {Dims{37, 45}, Dims{1, 45}, Dims{7, 1}, Dims{3, 130}}) {
    const std::string tag = fmt::format("rows{} L{}", s.rows, s.L);
    auto x = random_vector(s.rows * s.L, 51, -3.f, 3.f), dy = random_vector(s.rows * s.L, 52);
    std::vector<float> y(s.rows * s.L), dx(s.rows * s.L), dx_ref(s.rows * s.L);
    ops::softmax_forward_reference(y.data(), x.data(), s.rows, s.L);
    ops::softmax_backward(dx.data(), dy.data(), y.data(), s.rows, s.L);
    ops::softmax_backward_reference(dx_ref.data(), dy.data(), y.data(), s.rows, s.L);
    compare("softmax_backward " + tag, dx, dx_ref, kFastTol);

    auto xd = to_double(x), dyd = to_double(dy);
    compare_model("softmax " + tag, softmax_fwd(xd, s.rows, s.L), y);
    if (s.L > 1)  // L = 1: the output is constant, the gradient 0 (checked exactly below)
      fd_check("softmax dx " + tag, xd, dx_ref, [&] { return dot(dyd, softmax_fwd(xd, s.rows, s.L)); }, 53);
    else
      CHECK(*std::max_element(dx_ref.begin(), dx_ref.end(), [](float a, float b) {
        return std::abs(a) < std::abs(b);
      }) == 0.f);
  }
}

TEST_CASE("Activation backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  for (Activation act : {Activation::gelu, Activation::tanh}) {
    const char* name = act == Activation::gelu ? "gelu" : "tanh";
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1003}}) {
      const std::string tag = fmt::format("{} n{}", name, n);
      auto x = random_vector(n, 61, -4.f, 4.f), dy = random_vector(n, 62);
      std::vector<float> y(n);
      ops::activation_forward_reference(y.data(), x.data(), n, act);
      // gelu differentiates from the input, tanh from the output.
      const std::vector<float>& from = act == Activation::gelu ? x : y;
      std::vector<float> dx(n), dx_ref(n);
      ops::ActivationGrad(n, act).forward(dx.data(), dy.data(), from.data());
      ops::activation_backward_reference(dx_ref.data(), dy.data(), from.data(), n, act);
      compare("ActivationGrad " + tag, dx, dx_ref, kFastTol);

      auto xd = to_double(x), dyd = to_double(dy);
      compare_model("activation " + tag, activation_fwd(xd, act), y);
      fd_check("activation dx " + tag, xd, dx_ref, [&] { return dot(dyd, activation_fwd(xd, act)); }, 63);
    }
  }
}

TEST_CASE("Fused dropout + softmax backward equals the two kernels, the reference and finite differences",
          "[ops][backward]") {
  struct Dims {
    int64_t rows, L;
  };
  const ops::DropoutKey key{77, 5, 1};
  const uint64_t salt = 3;
  for (float p : {0.1f, 0.5f})
    for (Dims s : {Dims{37, 45}, Dims{1, 45}, Dims{7, 1}, Dims{96, 128}, Dims{5, 131}}) {
      const std::string tag = fmt::format("p{} rows{} L{}", p, s.rows, s.L);
      const int64_t n = s.rows * s.L;
      auto x = random_vector(n, 81, -3.f, 3.f), dy = random_vector(n, 82);
      std::vector<float> y(n);
      ops::softmax_forward_reference(y.data(), x.data(), s.rows, s.L);
      // The two kernels the executor ran before (dropout_grad is dropout_forward on dy).
      std::vector<float> dropped(n), two(n);
      ops::dropout_forward(dropped.data(), dy.data(), n, p, salt, key);
      ops::softmax_backward(two.data(), dropped.data(), y.data(), s.rows, s.L);
      // Inputs at an odd offset in their buffers (as in the activation arena), then in place:
      // the output over dy, and over y.
      std::vector<float> dy_buf(n + 3), y_buf(n + 5), dx_buf(n + 1);
      std::copy(dy.begin(), dy.end(), dy_buf.begin() + 3);
      std::copy(y.begin(), y.end(), y_buf.begin() + 5);
      ops::dropout_softmax_backward(dx_buf.data() + 1, dy_buf.data() + 3, y_buf.data() + 5, s.rows, s.L, p, salt, key);
      check_bit_identical("dropout_softmax_backward == dropout then softmax_backward " + tag,
                          std::vector<float>(dx_buf.begin() + 1, dx_buf.end()), two);
      auto in_place = dy;
      ops::dropout_softmax_backward(in_place.data(), in_place.data(), y.data(), s.rows, s.L, p, salt, key);
      check_bit_identical("dropout_softmax_backward in place over dy " + tag, in_place, two);
      auto over_y = y;
      ops::dropout_softmax_backward(over_y.data(), dy.data(), over_y.data(), s.rows, s.L, p, salt, key);
      check_bit_identical("dropout_softmax_backward in place over y " + tag, over_y, two);

      // Against the double reference on the mask from dropout_keeps (an independent loop).
      std::vector<float> masked(n), ref(n);
      for (int64_t i = 0; i < n; ++i) masked[i] = ops::dropout_keeps(i, p, salt, key) ? dy[i] / (1.f - p) : 0.f;
      ops::softmax_backward_reference(ref.data(), masked.data(), y.data(), s.rows, s.L);
      compare("dropout_softmax_backward vs reference " + tag, two, ref, kFastTol);
      // Finite differences of L = sum dy * dropout(softmax(x)) in x.
      if (s.L > 1 && n <= 2000) {
        auto xd = to_double(x), dyd = to_double(dy);
        auto loss = [&] {
          auto sm = softmax_fwd(xd, s.rows, s.L);
          double acc = 0;
          for (int64_t i = 0; i < n; ++i)
            if (ops::dropout_keeps(i, p, salt, key)) acc += dyd[i] * sm[i] / (1.0 - p);
          return acc;
        };
        fd_check("dropout_softmax_backward dx " + tag, xd, two, loss, 83);
      }
    }
}

TEST_CASE("Fused dropout + residual add equals the two kernels, in place too", "[ops]") {
  const ops::DropoutKey key{31, 4, 2};
  const uint64_t salt = 8;
  for (float p : {0.1f, 0.5f})
    for (int64_t n : {int64_t{1}, int64_t{45}, int64_t{98304}}) {
      const std::string tag = fmt::format("p{} n{}", p, n);
      auto x = random_vector(n, 91), r = random_vector(n, 92);
      std::vector<float> dropped(n), two(n);
      ops::dropout_forward(dropped.data(), x.data(), n, p, salt, key);
      ops::add_forward(two.data(), dropped.data(), r.data(), n);
      std::vector<float> x_buf(n + 3), y_buf(n + 1);  // odd offsets, as in the activation arena
      std::copy(x.begin(), x.end(), x_buf.begin() + 3);
      ops::dropout_add_forward(y_buf.data() + 1, x_buf.data() + 3, r.data(), n, p, salt, key);
      check_bit_identical("dropout_add_forward == dropout then add " + tag,
                          std::vector<float>(y_buf.begin() + 1, y_buf.end()), two);
      auto over_x = x, over_r = r;
      ops::dropout_add_forward(over_x.data(), over_x.data(), r.data(), n, p, salt, key);
      check_bit_identical("dropout_add_forward in place over x " + tag, over_x, two);
      ops::dropout_add_forward(over_r.data(), x.data(), over_r.data(), n, p, salt, key);
      check_bit_identical("dropout_add_forward in place over r " + tag, over_r, two);
      int64_t changed = 0;  // the mask is not all-keep: the test compares something
      for (int64_t i = 0; i < n; ++i) changed += two[i] != x[i] + r[i];
      if (n > 1000) CHECK(changed > 0);
    }
}

TEST_CASE("Dropout backward regenerates the forward mask", "[ops][backward]") {
  const ops::DropoutKey key{1234, 17, 2};
  const uint64_t salt = 99;
  for (float p : {0.1f, 0.5f}) {
    for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{100003}}) {
      auto dy = random_vector(n, 71);
      std::vector<float> dx(n);
      ops::dropout_forward(dx.data(), dy.data(), n, p, salt, key);
      const float scale = 1.f / (1.f - p);
      std::vector<float> expect(n);
      int64_t kept = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = ops::dropout_keeps(i, p, salt, key);
        kept += keep;
        expect[i] = keep ? dy[i] * scale : 0.f;
      }
      check_bit_identical(fmt::format("dropout dx == dy * mask / (1-p) p{} n{}", p, n), dx, expect);
      if (n > 1000) {
        // Binomial(n, 1-p): 5 standard deviations.
        const double frac = double(kept) / n, sd = std::sqrt(p * (1.0 - p) / n);
        fmt::print("  dropout keep fraction p{} n{}: {:.5f} (expected {:.5f} +- {:.5f})\n", p, n, frac,
                   1.0 - p, 5 * sd);
        CHECK(std::abs(frac - (1.0 - p)) <= 5 * sd);

        // The mask does not depend on the thread count.
        const int threads = omp_get_max_threads();
        std::vector<float> one(n), two(n);
        omp_set_num_threads(1);
        ops::dropout_forward(one.data(), dy.data(), n, p, salt, key);
        omp_set_num_threads(2);
        ops::dropout_forward(two.data(), dy.data(), n, p, salt, key);
        omp_set_num_threads(threads);
        check_bit_identical(fmt::format("dropout 1 thread vs 2 threads p{} n{}", p, n), one, two);

        // A different salt gives a different mask.
        std::vector<float> other(n);
        ops::dropout_forward(other.data(), dy.data(), n, p, salt + 1, key);
        CHECK(std::memcmp(other.data(), dx.data(), n * sizeof(float)) != 0);
      }
      // Finite differences of L = sum dy * dropout(x) (linear, so exact up to rounding).
      if (n <= 1000) {
        auto x = random_vector(n, 72);
        auto xd = to_double(x), dyd = to_double(dy);
        auto loss = [&] {
          double s = 0;
          for (int64_t i = 0; i < n; ++i)
            s += dyd[i] * (ops::dropout_keeps(i, p, salt, key) ? xd[i] / (1.0 - p) : 0.0);
          return s;
        };
        fd_check(fmt::format("dropout dx p{} n{}", p, n), xd, dx, loss, 73);
      }
    }
  }
}

TEST_CASE("Embedding backward: fast equals reference with repeated ids, and finite differences",
          "[ops][backward]") {
  struct Dims {
    int64_t B, S, H, vocab, types;
  };
  for (Dims s : {Dims{3, 13, 37, 11, 2}, Dims{1, 1, 37, 5, 2}, Dims{2, 9, 70, 3, 3}}) {
    const std::string tag = fmt::format("B{} S{} H{} vocab{}", s.B, s.S, s.H, s.vocab);
    const int64_t T = s.B * s.S;
    auto ids = random_ids(T, s.vocab, 81), type_ids = random_ids(T, s.types, 82);
    if (T > 1) ids[1] = ids[0];  // at least one repeated id
    auto dout = random_vector(T * s.H, 83);
    const auto w0 = random_vector(s.vocab * s.H, 84), p0 = random_vector(s.S * s.H, 85),
               t0 = random_vector(s.types * s.H, 86);
    auto dw = w0, dp = p0, dt = t0, dw_ref = w0, dp_ref = p0, dt_ref = t0;
    ops::embedding_backward(dw.data(), dp.data(), dt.data(), dout.data(), ids.data(), type_ids.data(),
                            s.B, s.S, s.H);
    ops::embedding_backward_reference(dw_ref.data(), dp_ref.data(), dt_ref.data(), dout.data(),
                                      ids.data(), type_ids.data(), s.B, s.S, s.H);
    // Same additions in the same order per element: bit-identical.
    check_bit_identical("embedding_backward dword (+= prefilled) " + tag, dw, dw_ref);
    check_bit_identical("embedding_backward dpos (+= prefilled) " + tag, dp, dp_ref);
    check_bit_identical("embedding_backward dtype (+= prefilled) " + tag, dt, dt_ref);

    std::vector<float> gw(w0.size(), 0.f), gp(p0.size(), 0.f), gt(t0.size(), 0.f);
    ops::embedding_backward_reference(gw.data(), gp.data(), gt.data(), dout.data(), ids.data(),
                                      type_ids.data(), s.B, s.S, s.H);
    auto wd = to_double(w0), pd = to_double(p0), td = to_double(t0), dd = to_double(dout);
    std::vector<float> out_op(T * s.H);
    ops::embedding_forward_reference(out_op.data(), ids.data(), type_ids.data(), w0.data(), p0.data(),
                                     t0.data(), s.B, s.S, s.H);
    compare_model("embedding " + tag, embedding_fwd(wd, pd, td, ids, type_ids, s.B, s.S, s.H), out_op);
    auto loss = [&] { return dot(dd, embedding_fwd(wd, pd, td, ids, type_ids, s.B, s.S, s.H)); };
    fd_check("embedding dword " + tag, wd, gw, loss, 87);
    fd_check("embedding dpos " + tag, pd, gp, loss, 88);
    fd_check("embedding dtype " + tag, td, gt, loss, 89);
    // A repeated id gets the sum of its rows of dout.
    if (T > 1) {
      double worst = 0;
      for (int64_t c = 0; c < s.H; ++c) {
        double expect = 0;
        for (int64_t t = 0; t < T; ++t)
          if (ids[t] == ids[0]) expect += dout[t * s.H + c];
        worst = std::max(worst, std::abs(expect - gw[ids[0] * s.H + c]));
      }
      CHECK(worst <= 1e-5);
    }
  }
}

TEST_CASE("gather_rows_backward and first_token_backward equal plain loops", "[ops][backward]") {
  struct Dims {
    int64_t B, S, P, H;
  };
  for (Dims s : {Dims{3, 13, 5, 37}, Dims{1, 1, 1, 37}, Dims{2, 7, 9, 3}}) {
    const std::string tag = fmt::format("B{} S{} P{} H{}", s.B, s.S, s.P, s.H);
    auto positions = random_ids(s.B * s.P, int32_t(s.S), 91);
    if (s.P > 1)
      for (int64_t b = 0; b < s.B; ++b) positions[b * s.P + 1] = positions[b * s.P];  // repeats
    auto dy = random_vector(s.B * s.P * s.H, 92);
    std::vector<float> dx(s.B * s.S * s.H, 7.f), expect(s.B * s.S * s.H, 0.f);  // dx overwritten
    ops::gather_rows_backward(dx.data(), dy.data(), positions.data(), s.B, s.S, s.P, s.H);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t p = 0; p < s.P; ++p)
        for (int64_t c = 0; c < s.H; ++c)
          expect[(b * s.S + positions[b * s.P + p]) * s.H + c] += dy[(b * s.P + p) * s.H + c];
    check_bit_identical("gather_rows_backward " + tag, dx, expect);

    // Finite differences of L = sum dy * gather(x).
    auto x = random_vector(s.B * s.S * s.H, 93);
    std::vector<float> y_op(s.B * s.P * s.H);
    ops::gather_rows_forward(y_op.data(), x.data(), positions.data(), s.B, s.S, s.P, s.H);
    auto xd = to_double(x), dyd = to_double(dy);
    auto gather = [&] {
      std::vector<double> y(s.B * s.P * s.H);
      for (int64_t r = 0; r < s.B * s.P; ++r)
        for (int64_t c = 0; c < s.H; ++c) y[r * s.H + c] = xd[((r / s.P) * s.S + positions[r]) * s.H + c];
      return y;
    };
    compare_model("gather_rows " + tag, gather(), y_op);
    fd_check("gather_rows dx " + tag, xd, dx, [&] { return dot(dyd, gather()); }, 94);

    std::vector<float> dfirst(s.B * s.S * s.H, 7.f), first_expect(s.B * s.S * s.H, 0.f);
    auto dcls = random_vector(s.B * s.H, 95);
    ops::first_token_backward(dfirst.data(), dcls.data(), s.B, s.S, s.H);
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t c = 0; c < s.H; ++c) first_expect[b * s.S * s.H + c] = dcls[b * s.H + c];
    check_bit_identical("first_token_backward " + tag, dfirst, first_expect);
  }
}

TEST_CASE("Cross-entropy backward: fast equals reference, reference equals finite differences",
          "[ops][backward]") {
  struct Dims {
    int64_t N, C;
  };
  for (Dims s : {Dims{37, 45}, Dims{1, 45}, Dims{9, 2}, Dims{5, 1003}}) {
    const std::string tag = fmt::format("N{} C{}", s.N, s.C);
    auto logits = random_vector(s.N * s.C, 101, -4.f, 4.f);
    auto labels = random_ids(s.N, int32_t(s.C), 102);
    for (int64_t r = 2; r < s.N; r += 3) labels[r] = ops::kIgnoreLabel;
    double count = 0;
    for (auto l : labels) count += l != ops::kIgnoreLabel;
    const float denominator = float(count) + 2.5f;  // any positive denominator
    std::vector<float> d(s.N * s.C, 7.f), d_ref(s.N * s.C, 7.f);
    ops::cross_entropy_backward(d.data(), logits.data(), labels.data(), s.N, s.C, denominator);
    ops::cross_entropy_backward_reference(d_ref.data(), logits.data(), labels.data(), s.N, s.C,
                                          denominator);
    compare("cross_entropy_backward " + tag, d, d_ref, kFastTol);
    for (int64_t r = 0; r < s.N; ++r)
      if (labels[r] == ops::kIgnoreLabel)
        for (int64_t i = 0; i < s.C; ++i) CHECK(d[r * s.C + i] == 0.f);

    auto ld = to_double(logits);
    const auto stats = ops::cross_entropy_forward_reference(logits.data(), labels.data(), s.N, s.C);
    const double model = cross_entropy_fwd(ld, labels, s.N, s.C);
    fmt::print("  cross_entropy loss_sum {}: model {:.12g}, reference {:.12g}\n", tag, model,
               stats.loss_sum);
    CHECK(std::abs(model - stats.loss_sum) <= kModelTol * std::max(1.0, std::abs(stats.loss_sum)));
    CHECK(stats.count == count);
    fd_check("cross_entropy dlogits " + tag, ld, d_ref,
             [&] { return cross_entropy_fwd(ld, labels, s.N, s.C) / denominator; }, 103);
  }
}

TEST_CASE("Fused AdamW over many tensors equals per-tensor kernels and the reference", "[ops][backward]") {
  // Segments of uneven sizes (1 element up to several thread chunks and several of the fused
  // kernel's 65536-element blocks) so thread ranges and blocks cross segment boundaries;
  // alternate decay on and off.
  const std::vector<int64_t> sizes = {1, 37, 3 * 1001, 5, 4096, 2, 777, 200003, 3};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const auto p0 = random_vector(total, 211), m0 = random_vector(total, 212, -0.1f, 0.1f),
             v0 = random_vector(total, 213, 0.f, 0.01f), g = random_vector(total, 214);
  ops::AdamHyper h;
  h.lr = 1e-3f, h.step = 5, h.grad_scale = 0.7f;
  auto p = p0, m = m0, v = v0, pk = p0, mk = m0, vk = v0, pr = p0, mr = m0, vr = v0;
  std::vector<ops::AdamSegment> segments;
  int64_t at = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = sizes[k];
    const bool decay = k % 2 == 0;
    segments.push_back({p.data() + at, m.data() + at, v.data() + at, g.data() + at, n, decay});
    ops::adamw_update(pk.data() + at, mk.data() + at, vk.data() + at, g.data() + at, n, h, decay);
    ops::adamw_update_reference(pr.data() + at, mr.data() + at, vr.data() + at, g.data() + at, n, h, decay);
    at += n;
  }
  ops::adamw_update_fused(segments, h);
  check_bit_identical("fused adamw p vs per-tensor adamw_update", p, pk);
  check_bit_identical("fused adamw m vs per-tensor adamw_update", m, mk);
  check_bit_identical("fused adamw v vs per-tensor adamw_update", v, vk);
  compare("fused adamw p vs reference", p, pr, kOptTol);
  compare("fused adamw m vs reference", m, mr, kOptTol);
  compare("fused adamw v vs reference", v, vr, kOptTol);
  CHECK(std::memcmp(p.data(), p0.data(), total * sizeof(float)) != 0);  // it did update
}

TEST_CASE("Fused LAMB over many tensors equals per-tensor kernels and the reference", "[ops][backward]") {
  // As for AdamW: uneven tensors, decay alternating; and on 1, 2 and 3 threads, since each
  // tensor's norms are summed over the threads' chunks in thread order.
  const std::vector<int64_t> sizes = {1, 37, 3 * 1001, 5, 4096, 2, 777};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const auto p0 = random_vector(total, 221), m0 = random_vector(total, 222, -0.1f, 0.1f),
             v0 = random_vector(total, 223, 0.f, 0.01f), g = random_vector(total, 224);
  ops::AdamHyper h;
  h.lr = 1e-3f, h.step = 4, h.grad_scale = 0.6f;
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    auto p = p0, m = m0, v = v0, pk = p0, mk = m0, vk = v0, pr = p0, mr = m0, vr = v0;
    std::vector<ops::AdamSegment> segments;
    int64_t at = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t n = sizes[k];
      const bool decay = k % 2 == 1;
      segments.push_back({p.data() + at, m.data() + at, v.data() + at, g.data() + at, n, decay});
      ops::lamb_update(pk.data() + at, mk.data() + at, vk.data() + at, g.data() + at, n, h, decay, 1);
      ops::lamb_update_reference(pr.data() + at, mr.data() + at, vr.data() + at, g.data() + at, n, h, decay);
      at += n;
    }
    ops::lamb_update_fused(segments, h);
    const std::string tag = fmt::format(" ({} threads)", threads);
    check_bit_identical("fused lamb p vs per-tensor lamb_update" + tag, p, pk);
    check_bit_identical("fused lamb m vs per-tensor lamb_update" + tag, m, mk);
    check_bit_identical("fused lamb v vs per-tensor lamb_update" + tag, v, vk);
    compare("fused lamb p vs reference" + tag, p, pr, kOptTol);
    compare("fused lamb m vs reference" + tag, m, mr, kOptTol);
    CHECK(std::memcmp(p.data(), p0.data(), total * sizeof(float)) != 0);  // it did update
  }
  omp_set_num_threads(threads_before);
}

TEST_CASE("Fused gradient norm equals per-tensor sums and a plain double loop", "[ops][backward]") {
  // The clipping norm's sum of squares over many tensors in one parallel region must be the
  // very same double as sum_of_squares tensor by tensor, added in order, on 1, 2 and 3 threads.
  const std::vector<int64_t> sizes = {1, 37, 3 * 1001, 5, 4096, 2, 777, 100003};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const auto g = random_vector(total, 231);
  double plain = 0;
  for (float x : g) plain += double(x) * x;
  const int threads_before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<std::pair<const float*, int64_t>> tensors;
    double per_tensor = 0;
    int64_t at = 0;
    for (int64_t n : sizes) {
      tensors.emplace_back(g.data() + at, n);
      per_tensor += ops::sum_of_squares(g.data() + at, n);
      at += n;
    }
    const double fused = ops::sum_of_squares_fused(tensors);
    INFO("threads " << threads << ": fused " << fused << ", per tensor " << per_tensor << ", plain " << plain);
    CHECK(std::memcmp(&fused, &per_tensor, sizeof(double)) == 0);
    CHECK(std::abs(fused - plain) <= 1e-12 * plain);
    CHECK(fused > 0);
  }
  omp_set_num_threads(threads_before);
  CHECK(ops::sum_of_squares_fused({}) == 0.0);
}

TEST_CASE("Optimizer updates: fast equals reference, deterministic", "[ops][backward]") {
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{3 * 1001}}) {
    auto p0 = random_vector(n, 111), m0 = random_vector(n, 112, -0.1f, 0.1f),
         v0 = random_vector(n, 113, 0.f, 0.01f), g = random_vector(n, 114);
    ops::AdamHyper h;
    h.lr = 1e-3f, h.step = 3, h.grad_scale = 0.5f;
    for (bool decay : {false, true}) {
      const std::string tag = fmt::format("n{} decay {}", n, decay);
      {
        auto p = p0, m = m0, v = v0, pr = p0, mr = m0, vr = v0;
        ops::adamw_update(p.data(), m.data(), v.data(), g.data(), n, h, decay);
        ops::adamw_update_reference(pr.data(), mr.data(), vr.data(), g.data(), n, h, decay);
        compare("adamw p " + tag, p, pr, kOptTol);
        compare("adamw m " + tag, m, mr, kOptTol);
        compare("adamw v " + tag, v, vr, kOptTol);
        auto p2 = p0, m2 = m0, v2 = v0;
        ops::adamw_update(p2.data(), m2.data(), v2.data(), g.data(), n, h, decay);
        check_bit_identical("adamw run to run " + tag, p2, p);
      }
      {
        auto p = p0, m = m0, v = v0, pr = p0, mr = m0, vr = v0;
        ops::lamb_update(p.data(), m.data(), v.data(), g.data(), n, h, decay, 1);
        ops::lamb_update_reference(pr.data(), mr.data(), vr.data(), g.data(), n, h, decay);
        compare("lamb p (segments 1) " + tag, p, pr, kOptTol);
        compare("lamb m (segments 1) " + tag, m, mr, kOptTol);
        compare("lamb v (segments 1) " + tag, v, vr, kOptTol);
        auto p2 = p0, m2 = m0, v2 = v0;
        ops::lamb_update(p2.data(), m2.data(), v2.data(), g.data(), n, h, decay, 1);
        check_bit_identical("lamb run to run " + tag, p2, p);
      }
      if (n % 3 == 0) {
        // Three segments: one trust ratio per third, as three separate tensors.
        const int64_t part = n / 3;
        auto p = p0, m = m0, v = v0, pr = p0, mr = m0, vr = v0;
        ops::lamb_update(p.data(), m.data(), v.data(), g.data(), n, h, decay, 3);
        for (int64_t s = 0; s < 3; ++s)
          ops::lamb_update_reference(pr.data() + s * part, mr.data() + s * part, vr.data() + s * part,
                                     g.data() + s * part, part, h, decay);
        compare("lamb p (segments 3 vs 3 reference calls) " + tag, p, pr, kOptTol);
        // A single trust ratio over the whole tensor differs (thirds with different norms).
        auto scaled = p0;
        for (int64_t i = 0; i < part; ++i) scaled[i] *= 3.f;
        auto pa = scaled, ma = m0, va = v0, pb = scaled, mb = m0, vb = v0;
        ops::lamb_update(pa.data(), ma.data(), va.data(), g.data(), n, h, decay, 3);
        ops::lamb_update(pb.data(), mb.data(), vb.data(), g.data(), n, h, decay, 1);
        CHECK(std::memcmp(pa.data(), pb.data(), n * sizeof(float)) != 0);
      }
    }
    // sum_of_squares against a double loop, and run to run.
    double expect = 0;
    for (float x : g) expect += double(x) * x;
    const double got = ops::sum_of_squares(g.data(), n), again = ops::sum_of_squares(g.data(), n);
    const double rel = std::abs(got - expect) / expect;
    fmt::print("  {:<52} n {:>6}  rel {:9.2e}  (tol 1e-12)\n", "sum_of_squares vs double loop", n, rel);
    CHECK(rel <= 1e-12);
    CHECK(std::memcmp(&got, &again, sizeof got) == 0);
  }
}

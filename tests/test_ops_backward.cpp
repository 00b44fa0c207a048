// The backward and optimizer kernels of ops/ where the op-table loop (tests/test_op_table.cpp:
// every op kind's gradients, as autodiff emits and the executor runs them, against central
// finite differences at several sizes, added to a filled gradient arena and over kept weight
// copies) does not reach:
//  - the linear layer's gradient GEMMs reading B in place, which the executor does only for a
//    weight over kLargeWeightBytes (the tied MLM decoder), against the packed B and the reference;
//  - the fused kernels against the kernels they replace, bit for bit, in place and at odd
//    offsets (dropout + softmax backward, dropout + residual add);
//  - the dropout mask's statistics and its independence of the thread count;
//  - the optimizer updates and the gradient norm (fused and per tensor) against their references.
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
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "ops/optimizer.h"

using namespace bertlab;

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

std::vector<double> softmax_fwd(const std::vector<double>& x, int64_t rows, int64_t L) {
  std::vector<double> y(rows * L);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = *std::max_element(x.begin() + r * L, x.begin() + (r + 1) * L), sum = 0;
    for (int64_t i = 0; i < L; ++i) sum += std::exp(x[r * L + i] - mx);
    for (int64_t i = 0; i < L; ++i) y[r * L + i] = std::exp(x[r * L + i] - mx) / sum;
  }
  return y;
}

}  // namespace

TEST_CASE("Linear backward GEMMs read B in place as they read it packed", "[ops][backward]") {
  struct Dims {
    int64_t M, N, K;
  };
  for (Dims s : {Dims{37, 53, 29}, Dims{1, 53, 29}, Dims{19, 1, 45}, Dims{70, 96, 160}}) {
    const std::string tag = fmt::format("M{} N{} K{}", s.M, s.N, s.K);
    auto x = random_vector(s.M * s.K, 1), w = random_vector(s.N * s.K, 2), dy = random_vector(s.M * s.N, 4);
    // dw and db pre-filled: the GEMMs add to them.
    std::vector<float> dx_ref(s.M * s.K);
    ops::linear_grad_input_reference(dx_ref.data(), dy.data(), w.data(), s.M, s.N, s.K);
    const auto dw0 = random_vector(s.N * s.K, 5), db0 = random_vector(s.N, 6);
    auto dw_ref = dw0, db_ref = db0;
    ops::linear_grad_weight_reference(dw_ref.data(), db_ref.data(), dy.data(), x.data(), s.M, s.N, s.K);
    for (bool pack : {false, true}) {
      const std::string how = tag + (pack ? " packed B" : " B in place");
      std::vector<float> dx(s.M * s.K);
      ops::LinearGradInput grad_input(s.M, s.N, s.K, false, false, pack);
      CHECK((grad_input.weight_copy_bytes() > 0) == pack);
      grad_input.forward(dx.data(), dy.data(), w.data());
      compare("linear_grad_input " + how, dx, dx_ref, kFastTol);
      auto dw = dw0, db = db0;
      ops::LinearGradWeight(s.M, s.N, s.K, false, false, pack).forward(dw.data(), db.data(), dy.data(), x.data());
      compare("linear_grad_weight dw (+= prefilled) " + how, dw, dw_ref, kFastTol);
      compare("linear_grad_weight db (+= prefilled) " + how, db, db_ref, kFastTol);
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
    }
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

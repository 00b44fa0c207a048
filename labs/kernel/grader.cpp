// Lab 2's grader: the student's layernorm against bertlab's reference and finite differences on
// odd shapes, its speed against the oneDNN path, and 100 steps of BERT-mini training with it in
// place of bertlab's kernel (through runtime/kernel_seam.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "labs/common/grader.h"
#include "labs/kernel/install.h"
#include "labs/kernel/lab.h"
#include "ops/normalization.h"
#include "report/chart.h"
#include "runtime/kernel_seam.h"
#include "runtime/trainer.h"

namespace fs = std::filesystem;
using namespace bertlab;
using namespace bertlab::lab;

namespace {

struct Shape {
  int64_t rows, H;
};
// Odd sizes on purpose: a kernel that assumes H is a multiple of 8 or 16 fails them.
constexpr Shape kOddShapes[] = {{1, 1}, {3, 7}, {5, 33}, {2, 100}, {17, 769}};
constexpr float kEps = 1e-5f;

std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The loss the finite differences differentiate: L = sum(w * layernorm(x)), in double.
double loss_double(const std::vector<double>& x, const std::vector<double>& gamma, const std::vector<double>& beta,
                   const std::vector<float>& w, Shape s) {
  double L = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < s.H; ++i) mean += x[r * s.H + i];
    mean /= s.H;
    for (int64_t i = 0; i < s.H; ++i) var += (x[r * s.H + i] - mean) * (x[r * s.H + i] - mean);
    const double rstd = 1 / std::sqrt(var / s.H + kEps);
    for (int64_t i = 0; i < s.H; ++i) L += w[r * s.H + i] * ((x[r * s.H + i] - mean) * rstd * gamma[i] + beta[i]);
  }
  return L;
}

// Central differences of loss_double with respect to every element of `v` (one of x, gamma, beta).
std::vector<float> finite_differences(std::vector<double>& v, const std::function<double()>& loss) {
  std::vector<float> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i], h = 1e-6 * std::max(1.0, std::abs(keep));
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    g[i] = static_cast<float>((up - down) / (2 * h));
  }
  return g;
}

Outcome forward_against_reference() {
  std::string shapes;
  // The odd shapes with x in [-2, 2], then rows of nearly equal values (x in [-0.001, 0.001]:
  // a variance far below eps, where eps decides the result).
  struct Case {
    Shape s;
    float x_range;
  };
  std::vector<Case> cases;
  for (const Shape s : kOddShapes) cases.push_back({s, 2.0f});
  cases.push_back({{4, 16}, 1e-3f});
  for (const auto& [s, range] : cases) {
    const auto x = random_vector(s.rows * s.H, 1, -range, range), gamma = random_vector(s.H, 2, 0.5f, 1.5f),
               beta = random_vector(s.H, 3);
    std::vector<float> got(x.size(), NAN), want(x.size());
    const std::string shape =
        fmt::format("{} x {}{}", s.rows, s.H, range < 1 ? ", rows of nearly equal values" : "");
    const std::string what = fmt::format("y ({})", shape);
    working_on("layernorm_forward on " + shape);
    kernel::layernorm_forward(got.data(), x.data(), gamma.data(), beta.data(), s.rows, s.H, kEps);
    ops::layernorm_forward_reference(want.data(), x.data(), gamma.data(), beta.data(), s.rows, s.H, kEps);
    auto o = compare(what, got, want, 1e-5, 1e-4, s.H);
    if (!o.pass) return o;
    shapes += fmt::format(" {}x{}", s.rows, s.H);
  }
  return passed("matches bertlab's reference on" + shapes + " (the last: nearly equal values)");
}

Outcome backward_against_finite_differences() {
  std::string shapes;
  for (const Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{4, 33}, Shape{2, 65}}) {
    const auto xf = random_vector(s.rows * s.H, 4), gf = random_vector(s.H, 5, 0.5f, 1.5f),
               bf = random_vector(s.H, 6), w = random_vector(s.rows * s.H, 7);
    std::vector<double> x(xf.begin(), xf.end()), gamma(gf.begin(), gf.end()), beta(bf.begin(), bf.end());
    auto loss = [&] { return loss_double(x, gamma, beta, w, s); };
    const auto dx_fd = finite_differences(x, loss), dg_fd = finite_differences(gamma, loss),
               db_fd = finite_differences(beta, loss);
    // dL/dy = w. dgamma and dbeta start at 0.25 to check that the kernel adds to them.
    std::vector<float> dx(xf.size(), NAN), dgamma(s.H, 0.25f), dbeta(s.H, 0.25f);
    working_on(fmt::format("layernorm_backward on {} x {}", s.rows, s.H));
    kernel::layernorm_backward(dx.data(), dgamma.data(), dbeta.data(), w.data(), xf.data(), gf.data(), s.rows, s.H,
                               kEps);
    std::vector<float> dg_want(s.H), db_want(s.H);
    for (int64_t i = 0; i < s.H; ++i) dg_want[i] = 0.25f + dg_fd[i], db_want[i] = 0.25f + db_fd[i];
    const std::string at = fmt::format(" ({} x {})", s.rows, s.H);
    for (auto o : {compare("dx" + at, dx, dx_fd, 2e-3, 2e-3, s.H),
                   compare("dgamma (0.25 before the call)" + at, dgamma, dg_want, 2e-3, 2e-3),
                   compare("dbeta (0.25 before the call)" + at, dbeta, db_want, 2e-3, 2e-3)})
      if (!o.pass) return o;
    shapes += fmt::format(" {}x{}", s.rows, s.H);
  }
  return passed("dx, dgamma and dbeta match central differences on" + shapes);
}

Outcome backward_against_reference() {
  const Shape s{64, 768};
  const auto x = random_vector(s.rows * s.H, 8), gamma = random_vector(s.H, 9, 0.5f, 1.5f),
             dy = random_vector(s.rows * s.H, 10);
  std::vector<float> dx(x.size(), NAN), dg(s.H, 0), db(s.H, 0), dx_ref(x.size()), dg_ref(s.H, 0), db_ref(s.H, 0);
  working_on("layernorm_backward on 64 x 768");
  kernel::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), s.rows, s.H, kEps);
  ops::layernorm_backward_reference(dx_ref.data(), dg_ref.data(), db_ref.data(), dy.data(), x.data(), gamma.data(),
                                    s.rows, s.H, kEps);
  for (auto o : {compare("dx (64 x 768)", dx, dx_ref, 1e-4, 1e-3, s.H), compare("dgamma", dg, dg_ref, 1e-3, 1e-3),
                 compare("dbeta", db, db_ref, 1e-3, 1e-3)})
    if (!o.pass) return o;
  return passed("dx, dgamma, dbeta match bertlab's reference at BERT's width (64 x 768)");
}

template <typename F>
double median_seconds(F&& f, int runs) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < runs; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string speed(const PlotPage& plots) {
  const Shape s{8 * 128, 768};  // BERT-base, batch 8, seq 128
  const auto x = random_vector(s.rows * s.H, 11), gamma = random_vector(s.H, 12), beta = random_vector(s.H, 13),
             dy = random_vector(s.rows * s.H, 14);
  std::vector<float> y(x.size()), dx(x.size()), dg(s.H), db(s.H);
  ops::LayerNorm onednn(s.rows, s.H, kEps);
  std::vector<float> scratch;
  const double fwd_student = median_seconds([&] { kernel::layernorm_forward(y.data(), x.data(), gamma.data(), beta.data(), s.rows, s.H, kEps); }, 15);
  const double fwd_bertlab = median_seconds([&] { onednn.forward(y.data(), x.data(), gamma.data(), beta.data()); }, 15);
  const double bwd_student = median_seconds([&] { kernel::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), s.rows, s.H, kEps); }, 15);
  const double bwd_bertlab = median_seconds([&] { ops::layernorm_backward(dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), s.rows, s.H, kEps, scratch); }, 15);
  const double gb = 2.0 * x.size() * sizeof(float) / 1e9;  // forward: read x, write y
  BarChart chart{"layernorm on 1024 x 768 (median of 15 runs)", "milliseconds", {"forward", "backward"},
                 {{"your kernel", {}, {fwd_student * 1e3, bwd_student * 1e3}},
                  {"bertlab (oneDNN forward, fused backward)", {}, {fwd_bertlab * 1e3, bwd_bertlab * 1e3}}}};
  plots.add("<h2>Speed</h2>\n" + bar_chart_html(chart));
  return fmt::format(
      "forward {:.3f} ms ({:.1f} GB/s) vs bertlab {:.3f} ms: {:.1f}x; backward {:.3f} ms vs {:.3f} ms: {:.1f}x",
      fwd_student * 1e3, gb / fwd_student, fwd_bertlab * 1e3, fwd_student / fwd_bertlab, bwd_student * 1e3,
      bwd_bertlab * 1e3, bwd_student / bwd_bertlab);
}

struct TrainSetup {
  fs::path config, data, out;
  int64_t steps, batch;
};

std::vector<double> train_losses(const TrainSetup& t, const fs::path& out) {
  TrainOptions o;
  o.config = t.config;
  o.data = t.data;
  o.out = out;
  o.overwrite = true;
  o.max_steps = t.steps;
  o.batch_size = t.batch;
  o.lr = 1e-3f;
  o.warmup_steps = t.steps / 10;
  o.seed = 7;
  o.log_steps = 1;
  o.eval_steps = t.steps;
  o.eval_batches = 2;
  std::vector<double> losses;
  train(o, [&](const TrainEvent& e) {
    if (e.kind == TrainEvent::step) losses.push_back(e.stats.loss());
  });
  return losses;
}

Outcome training(const TrainSetup& t, const PlotPage& plots) {
  if (!fs::exists(t.data / "meta.json"))
    return failed(fmt::format("no prepared data at {} (meta.json missing)", t.data.string()));
  // Yours first: a kernel that throws or produces NaN fails before the reference run.
  install_student_kernel();
  const auto yours = train_losses(t, t.out / "your-kernel");
  kernel_seam() = {};
  const auto ours = train_losses(t, t.out / "bertlab-kernel");
  ChartSeries a{"bertlab's layernorm", {}, ours}, b{"your layernorm", {}, yours};
  for (size_t i = 0; i < ours.size(); ++i) a.x.push_back(i + 1);
  for (size_t i = 0; i < yours.size(); ++i) b.x.push_back(i + 1);
  plots.add("<h2>Training with your kernel</h2>\n" +
            line_chart_html({fmt::format("masked-LM + NSP loss, {} steps", t.steps), "step", "loss", {a, b}}));
  if (yours.size() != ours.size()) return failed(fmt::format("{} steps done of {}", yours.size(), ours.size()));
  auto tail_mean = [](const std::vector<double>& v) {
    const size_t n = std::max<size_t>(1, v.size() / 10);
    double s = 0;
    for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
    return s / n;
  };
  for (size_t i = 0; i < yours.size(); ++i)
    if (!std::isfinite(yours[i])) return failed(fmt::format("the loss at step {} is {}", i + 1, yours[i]));
  const double mine = tail_mean(yours), ref = tail_mean(ours), first = yours.front();
  const std::string detail = fmt::format("loss {:.3f} -> {:.3f} (last tenth) with your kernel, {:.3f} with bertlab's",
                                         first, mine, ref);
  if (!(mine < first)) return failed(detail + ": the loss did not go down");
  if (std::abs(mine - ref) > 0.02 * ref) return failed(detail + ": more than 2% apart");
  return passed(detail);
}

// --quick (the test suite): BERT-tiny-sized model on the fixture corpus, prepared here.
TrainSetup quick_setup(const fs::path& dir) {
  const QuickFixture f = prepare_quick_fixture(dir);
  return {f.config, f.data, dir / "runs", 20, 4};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 2 grader: your layernorm (labs/kernel/student.cpp)"};
  TrainingLabOptions o;
  add_training_lab_options(app, o, "Training steps of the last check", "A small model on the test fixtures (the test suite)");
  CLI11_PARSE(app, argc, argv);

  Grader g("kernel: layernorm forward and backward", o.results_json);
  const PlotPage plots(o.out, "kernel");
  // Hints say what to look at, not the formulas (step 3 asks for the backward's); a later check's
  // hint says whether the earlier ones passed, as they did or did not.
  const bool forward_ok =
      g.check("forward matches the reference on odd shapes",
              "the detail names the shape and the first wrong element (row, column): is it wrong at every H, only "
              "at H = 1, only when H is not a multiple of 16, or only for rows of nearly equal values? Work that "
              "row out by hand beside lab.h's formulas",
              forward_against_reference);
  const bool fd_ok = g.check(
      "backward matches finite differences",
      "the detail names the output (dx, dgamma or dbeta), the shape and the first wrong element: is it off "
      "everywhere or only at one shape, and by how much? Check your derivation on the smallest shape by hand, "
      "and reread lab.h's contract for dgamma and dbeta",
      backward_against_finite_differences);
  const bool ref_ok = g.check(
      "backward matches the reference at BERT's width",
      fd_ok ? "your backward agrees with finite differences on small shapes but not at 64 x 768: look for what "
              "changes with size (a fixed-size buffer, work split over threads, sums over many elements)"
            : "the finite-difference check fails too: its shapes are smaller, fix that one first",
      backward_against_reference);
  // Timed, not graded: a loaded machine can make any kernel look slow.
  g.info("speed against bertlab's kernels (median of 15 runs)", [&] { return speed(plots); }, 300);
  const int64_t train_steps = o.quick ? 20 : o.steps;
  g.check(fmt::format("BERT training for {} steps with your kernel", train_steps),
          forward_ok && fd_ok && ref_ok
              ? "if the detail says the data is missing, prepare it (labs/kernel/README.md, step 4) or pass "
                "--data; a loss far from bertlab's means your kernel is wrong somewhere the checks above missed"
              : "the checks above fail too: they are smaller, fix those first (and prepare the data, "
                "labs/kernel/README.md step 4, if the detail says it is missing)",
          [&] {
            const TrainSetup setup =
                o.quick ? quick_setup(fs::path(o.out) / "kernel-quick")
                      : TrainSetup{source_dir() + "/configs/bert-mini.json", o.data, fs::path(o.out) / "kernel-runs", o.steps, 8};
            return training(setup, plots);
          },
          900);
  fmt::print("plots: {}\n", plots.write("Lab 2: your layernorm").string());
  return g.finish();
}

// Lab 4's grader: the student's bf16 rounding against Eigen's software bfloat16 on every float
// bit pattern (a stride of them with --quick), dynamic loss scaling against the GradScaler rules
// written out as a plain loop here, and measurements for the handout: fp32 against bf16
// throughput and loss curves, and activation memory against micro-batch size. On a CPU without
// native bf16 the bf16 half is skipped, said before any work starts; the fp32 half still runs.
// --quick (the test suite) measures a BERT-tiny-sized model on the test fixtures.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <vector>

#include "base/file_util.h"
#include "labs/common/grader.h"
#include "labs/precision/lab.h"
#include "report/chart.h"
#include "runtime/trainer.h"

namespace fs = std::filesystem;
using namespace bertlab;
using namespace bertlab::lab;
namespace P = bertlab::lab::precision;

namespace {

float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The reference: Eigen's software bfloat16 (round to nearest even, independent of the CPU); for
// NaN the contract of lab.h (Eigen returns one canonical NaN).
uint16_t reference_bf16(uint32_t bits) {
  const float f = float_of(bits);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x0040);
  return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(f));
}

std::string hex(uint32_t v, int digits) { return fmt::format("0x{:0{}x}", v, digits); }

// Every bit pattern (stride 1) or every stride-th one, with the special values always included.
Outcome rounding(uint64_t stride) {
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001,
                               0x7f800001, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x7f7fffff,
                               0x7f7f8000, 0x00000001, 0x00008000, 0x00018000, 0x807fffff};
  auto test = [](uint32_t bits, std::string& why) {
    const uint16_t got = P::float_to_bf16(float_of(bits)), want = reference_bf16(bits);
    if (got == want) return true;
    why = fmt::format("float {} ({:g}) gave bf16 {}, expected {}", hex(bits, 8), float_of(bits), hex(got, 4),
                      hex(want, 4));
    return false;
  };
  std::string why;
  for (uint32_t b : specials) {
    working_on(fmt::format("float_to_bf16 of the special value {}", hex(b, 8)));  // named if it crashes
    if (!test(b, why)) return failed("special value: " + why);
  }
  uint64_t checked = 0;
  for (uint64_t b = 0; b <= 0xffffffffull; b += stride, ++checked) {
    // Named by blocks of 2^16 patterns: a text per pattern would cost more than the check.
    if (b == 0 || (b >> 16) != ((b - stride) >> 16))
      working_on(fmt::format("float_to_bf16 of the patterns {} to {}", hex(uint32_t(b >> 16 << 16), 8),
                             hex(uint32_t(b >> 16 << 16 | 0xffff), 8)));
    if (!test(static_cast<uint32_t>(b), why)) return failed(why);
  }
  return passed(fmt::format("{} bit patterns{} round as Eigen's bfloat16 (nearest even)", checked,
                            stride == 1 ? " (all of them)" : fmt::format(" (every {}th)", stride)));
}

Outcome widening() {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    working_on(fmt::format("bf16_to_float of {}", hex(b, 4)));  // named if it crashes
    const float got = P::bf16_to_float(static_cast<uint16_t>(b)), want = float_of(b << 16);
    uint32_t gb;
    std::memcpy(&gb, &got, sizeof gb);
    if (gb != (b << 16))
      return failed(fmt::format("bf16 {} gave float {} ({:g}), expected {} ({:g})", hex(b, 4), hex(gb, 8), got,
                                hex(b << 16, 8), want));
  }
  return passed("all 65536 bf16 patterns widen exactly");
}

// The GradScaler rules as a plain loop, for comparison.
struct Reference {
  float scale = 65536.0f;
  int good = 0;
  bool update(bool finite, int interval) {
    if (!finite) {
      scale *= 0.5f;
      good = 0;
      return false;
    }
    if (++good == interval) scale *= 2.0f, good = 0;
    return true;
  }
};

Outcome loss_scaling() {
  // Unscaling: gradients with an overflow planted at one place, and clean ones.
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0, 1000);
  std::vector<float> g(1000);
  for (float scale : {65536.0f, 1024.0f, 1.0f, 0.5f}) {
    for (auto& v : g) v = d(gen);
    auto want = g;
    for (auto& v : want) v *= 1.0f / scale;
    auto got = g;
    working_on(fmt::format("unscale_gradients, scale {:g}, finite gradients", scale));
    if (!P::unscale_gradients(got.data(), got.size(), scale))
      return failed(fmt::format("unscale_gradients returned false on finite gradients (scale {:g})", scale));
    for (size_t i = 0; i < g.size(); ++i)
      if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
        return failed(fmt::format("unscale_gradients, scale {:g}: gradient {} is {:.9g}, expected {:.9g}", scale, i,
                                  got[i], want[i]));
  }
  // Overflows: the last gradient (a loop that stops early still has to find it), and the first
  // and a middle one (every gradient is still unscaled: a loop that returns at the first
  // infinity leaves the rest scaled).
  const size_t places[] = {g.size() - 1, 0, g.size() / 2};
  for (float bad : {INFINITY, -INFINITY, NAN})
    for (size_t at : places) {
      for (auto& v : g) v = d(gen);
      g[at] = bad;
      auto want = g;
      for (auto& v : want) v *= 1.0f / 1024.0f;
      working_on(fmt::format("unscale_gradients, scale 1024, a {} at gradient {}", bad, at));
      if (P::unscale_gradients(g.data(), g.size(), 1024.0f))
        return failed(fmt::format("unscale_gradients returned true with a {} gradient (gradient {})", bad, at));
      for (size_t i = 0; i < g.size(); ++i)
        if (i != at && std::memcmp(&g[i], &want[i], sizeof(float)) != 0)
          return failed(fmt::format("unscale_gradients, scale 1024, a {} at gradient {}: gradient {} is {:.9g}, "
                                    "expected {:.9g}",
                                    bad, at, i, g[i], want[i]));
    }
  // The scale over a scripted run: overflows at chosen steps, growth interval 3.
  const bool finite[] = {true, true, true, false, true, false, false, true, true, true, true, true, true, true};
  P::LossScaler s;
  s.growth_interval = 3;
  Reference r;
  for (size_t step = 0; step < std::size(finite); ++step) {
    working_on(fmt::format("update_scale at scripted step {}", step + 1));
    const bool apply = P::update_scale(s, finite[step]), want = r.update(finite[step], 3);
    if (apply != want || s.scale != r.scale || s.good_steps != r.good)
      return failed(fmt::format("step {} (gradients {}): returned {}, scale {:g}, good_steps {}; expected {}, {:g}, {}",
                                step + 1, finite[step] ? "finite" : "not finite", apply, s.scale, s.good_steps, want,
                                r.scale, r.good));
  }
  return passed(fmt::format("unscaling bit for bit at 4 scales, overflow found at 3 values in 3 places with every "
                            "other gradient unscaled, {} scripted steps",
                            std::size(finite)));
}

// A short run of `bertlab bench`; returns (sequences/s, planned activation MB).
std::pair<double, double> bench(const std::string& config, int batch, int seq, const char* precision) {
  const std::string cmd = fmt::format("{} bench --config '{}' --mode train --batch {} --seq {} --precision {} "
                                      "--runs 3 --warmup 1 --no-peak 2>&1",
                                      bertlab_command(), config, batch, seq, precision);
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (!p || pclose(p) != 0) throw std::runtime_error("bench failed: " + out);
  std::smatch m1, m2;
  std::regex_search(out, m1, std::regex(R"(throughput: ([0-9.]+) sequences/s)"));
  std::regex_search(out, m2, std::regex(R"(activations ([0-9.]+) MB)"));
  if (m1.empty() || m2.empty()) throw std::runtime_error("unexpected bench output: " + out);
  return {std::stod(m1[1]), std::stod(m2[1])};
}

// The measurements' sizes: the handout's (BERT-mini at seq 128 on the prepared corpus), or with
// --quick a BERT-tiny-sized model at seq 32 on the test fixtures, prepared here.
struct Measure {
  std::string config;
  int seq = 128;
  fs::path data;
  int64_t steps = 100;
  int batch = 8;
  bool bf16 = true;  // this CPU multiplies bf16 natively
};

std::string measure_throughput(const Measure& m, const PlotPage& plots) {
  const auto f = bench(m.config, 8, m.seq, "fp32");
  std::vector<std::string> precisions = {"fp32"};
  std::vector<double> rates = {f.first};
  if (m.bf16) {
    precisions.push_back("bf16");
    rates.push_back(bench(m.config, 8, m.seq, "bf16").first);
  }
  std::vector<double> mb;
  std::vector<std::string> groups;
  for (int batch : {1, 2, 4, 8}) {
    groups.push_back(fmt::format("micro-batch {}", batch));
    mb.push_back(bench(m.config, batch, m.seq, "fp32").second);
  }
  plots.add("<h2>Throughput</h2>\n" +
            bar_chart_html({fmt::format("training throughput, batch 8, seq {}", m.seq), "sequences/s", {"bertlab"},
                            [&] {
                              std::vector<ChartSeries> s;
                              for (size_t i = 0; i < rates.size(); ++i) s.push_back({precisions[i], {}, {rates[i]}});
                              return s;
                            }()}) +
            "<h2>Activation memory</h2>\n" +
            bar_chart_html({"planned activation memory (fp32)", "MB", groups, {{"activations", {}, mb}}}));
  const std::string bf16 = m.bf16 ? fmt::format(", bf16 {:.1f} seq/s ({:.2f}x)", rates[1], rates[1] / rates[0])
                                  : ", bf16 skipped (no native bf16)";
  return fmt::format("fp32 {:.1f} seq/s{}; activations {:.0f} MB at micro-batch 1 ... {:.0f} MB at 8", rates[0], bf16,
                     mb.front(), mb.back());
}

std::string measure_curves(const Measure& m, const fs::path& out, const PlotPage& plots) {
  if (!fs::exists(m.data / "meta.json")) {
    plots.add("<h2>Loss curves</h2>\n<p class=\"skipped\">No loss curves: no prepared data at " +
              html_escape(m.data.string()) + " (step 4 of the handout prepares it, or pass --data).</p>\n");
    throw std::runtime_error("no prepared data at " + m.data.string() + " (step 4 of the handout prepares it)");
  }
  LineChart chart{fmt::format("training loss, {} steps", m.steps), "step", "masked-LM + NSP loss", {}};
  std::string detail;
  std::vector<Precision> precisions = {Precision::fp32};
  if (m.bf16) precisions.push_back(Precision::bf16);
  for (Precision p : precisions) {
    TrainOptions o;
    o.config = m.config;
    o.data = m.data;
    o.out = out / to_string(p);
    o.overwrite = true;
    o.max_steps = m.steps;
    o.batch_size = m.batch;
    o.lr = 1e-3f;
    o.warmup_steps = m.steps / 10;
    o.precision = p;
    o.log_steps = 1;
    o.eval_steps = m.steps;
    o.eval_batches = 10;
    ChartSeries s{to_string(p), {}, {}};
    double acc = 0;
    train(o, [&](const TrainEvent& e) {
      if (e.kind == TrainEvent::step) s.x.push_back(e.step_index), s.y.push_back(e.stats.loss());
      if (e.kind == TrainEvent::eval) acc = e.stats.mlm_accuracy;
    });
    detail += fmt::format("{}{}: final loss {:.3f}, held-out MLM accuracy {:.3f}", detail.empty() ? "" : "; ",
                          to_string(p), s.y.back(), acc);
    chart.series.push_back(std::move(s));
  }
  plots.add("<h2>Loss curves</h2>\n" + line_chart_html(chart));
  return detail + (m.bf16 ? "" : "; bf16 skipped (no native bf16)");
}

// --quick: a BERT-tiny-sized model and the fixture corpus, prepared under `dir`.
Measure quick_measure(const fs::path& dir, bool bf16) {
  const QuickFixture f = prepare_quick_fixture(dir);
  return {f.config.string(), 32, f.data, 10, 4, bf16};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 4 grader: bf16 rounding and loss scaling (labs/precision/student.cpp)"};
  TrainingLabOptions o;
  add_training_lab_options(app, o, "Training steps of each loss curve", "Fewer bit patterns and smaller measurements (the test suite)");
  CLI11_PARSE(app, argc, argv);

  Grader g("precision: bf16 rounding and loss scaling", o.results_json);
  const PlotPage plots(o.out, "precision");
  // Before any work: can this CPU run the bf16 half of the measurements at all? (A bf16 GEMM on a CPU without
  // native bf16 is refused, so measuring it would only throw the fp32 half away.)
  const std::string no_bf16 = bf16_unavailable();
  if (!no_bf16.empty()) {
    const std::string why = fmt::format(
        "no native bf16 matmul here ({}): the bf16 throughput and the bf16 loss curve are left out; "
        "the fp32 throughput, the activation memory and the fp32 loss curve are still measured. The handout's "
        "ranges per CPU kind (docs/labs/ranges.md) say what a bf16 CPU gives",
        no_bf16);
    g.skipped("bf16 measurements", why);
    plots.add("<p class=\"skipped\">bf16 skipped: " + html_escape(why) + ".</p>\n");
  }
  g.check(o.quick ? "float_to_bf16 on every 65537th float bit pattern" : "float_to_bf16 on all 2^32 float bit patterns",
          "the detail names the first float that rounds wrong: is it a NaN, an infinity, the largest floats, or "
          "exactly half way between two bf16 values (its low 16 bits 0x8000)? Work that one through by hand",
          [&] { return rounding(o.quick ? 65537 : 1); }, 600);
  g.check("bf16_to_float on all 65536 bf16 patterns", "the detail names the first pattern that widens wrong: compare "
          "your float's bits with the bf16's, bit by bit", widening);
  g.check("loss scaling (GradScaler's rules)",
          "the detail names the first gradient or step that differs; reread lab.h's rules for that case and follow "
          "your code through it by hand",
          loss_scaling);
  g.info("throughput and activation memory", [&] {
    // bench needs no data: with --quick, BERT-tiny itself at seq 32.
    const Measure m{source_dir() + (o.quick ? "/configs/bert-tiny.json" : "/configs/bert-mini.json"), o.quick ? 32 : 128,
                    o.data, o.steps, 8, no_bf16.empty()};
    return measure_throughput(m, plots);
  }, 600);
  g.info("loss curves, fp32" + std::string(no_bf16.empty() ? " and bf16" : " (bf16 skipped)"), [&] {
    const Measure m = o.quick ? quick_measure(fs::path(o.out) / "precision-quick", no_bf16.empty())
                              : Measure{source_dir() + "/configs/bert-mini.json", 128, o.data, o.steps, 8, no_bf16.empty()};
    return measure_curves(m, fs::path(o.out) / "precision-runs", plots);
  }, 900);
  fmt::print("plots: {}\n", plots.write("Lab 4: mixed precision and memory").string());
  return g.finish();
}

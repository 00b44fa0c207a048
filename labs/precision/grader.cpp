// Lab 4's grader: the student's bf16 rounding against Eigen's software bfloat16 on every float
// bit pattern (a stride of them with --quick), dynamic loss scaling against the GradScaler rules
// written out as a plain loop here, and measurements for the handout: fp32 against bf16
// throughput and loss curves, and activation memory against micro-batch size.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <vector>

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

std::string measure_throughput(const std::string& config, int seq, const PlotPage& plots) {
  const auto f = bench(config, 8, seq, "fp32"), b = bench(config, 8, seq, "bf16");
  std::vector<double> mb;
  std::vector<std::string> groups;
  for (int batch : {1, 2, 4, 8}) {
    groups.push_back(fmt::format("micro-batch {}", batch));
    mb.push_back(bench(config, batch, seq, "fp32").second);
  }
  plots.add("<h2>Throughput</h2>\n" +
            bar_chart_svg({fmt::format("training throughput, batch 8, seq {}", seq), "sequences/s", {"fp32", "bf16"},
                           {{"bertlab", {}, {f.first, b.first}}}}) +
            "<h2>Activation memory</h2>\n" +
            bar_chart_svg({"planned activation memory (fp32)", "MB", groups, {{"activations", {}, mb}}}));
  return fmt::format("fp32 {:.1f} seq/s, bf16 {:.1f} seq/s ({:.2f}x); activations {:.0f} MB at micro-batch 1 ... "
                     "{:.0f} MB at 8",
                     f.first, b.first, b.first / f.first, mb.front(), mb.back());
}

std::string measure_curves(const fs::path& config, const fs::path& data, const fs::path& out, int64_t steps,
                           const PlotPage& plots) {
  if (!fs::exists(data / "meta.json")) throw std::runtime_error("no prepared data at " + data.string());
  LineChart chart{fmt::format("training loss, {} steps", steps), "step", "masked-LM + NSP loss", {}};
  std::string detail;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    TrainOptions o;
    o.config = config;
    o.data = data;
    o.out = out / to_string(p);
    o.overwrite = true;
    o.max_steps = steps;
    o.batch_size = 8;
    o.lr = 1e-3f;
    o.warmup_steps = steps / 10;
    o.precision = p;
    o.log_steps = 1;
    o.eval_steps = steps;
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
  plots.add("<h2>Loss curves</h2>\n" + line_chart_svg(chart));
  return detail;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lab 4 grader: bf16 rounding and loss scaling (labs/precision/student.cpp)"};
  TrainingLabOptions o;
  add_training_lab_options(app, o, "Training steps of each loss curve", "Fewer bit patterns and smaller measurements (the test suite)");
  CLI11_PARSE(app, argc, argv);

  Grader g("precision: bf16 rounding and loss scaling", o.results_json);
  const PlotPage plots(o.out, "precision");
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
  const std::string config = source_dir() + "/configs/bert-mini.json";
  if (!o.quick) {
    g.info("throughput and activation memory", [&] { return measure_throughput(config, 128, plots); }, 600);
    g.info("loss curves, fp32 and bf16",
           [&] { return measure_curves(config, o.data, fs::path(o.out) / "precision-runs", o.steps, plots); }, 900);
  }
  fmt::print("plots: {}\n", plots.write("Lab 4: mixed precision and memory").string());
  return g.finish();
}

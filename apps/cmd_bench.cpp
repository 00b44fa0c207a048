// bertlab bench: throughput of a BERT configuration (sequences/s, GFLOP/s, share of the
// measured GEMM peak, peak RSS), median of several timed runs after warm-up.
#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/profile_common.h"
#include "ops/peak.h"
#include "base/error.h"
#include "runtime/model.h"
#include "runtime/train_step.h"

namespace bertlab::app {

namespace {

struct BenchOptions {
  ModelShapeOptions shape;
  int runs = 5, warmup = 2, threads = 0;
  bool no_peak = false;
};

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

void add_bench_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "Measure throughput of a BERT configuration");
  auto o = std::make_shared<BenchOptions>();
  o->shape.heads = "none";
  add_model_shape_options(*cmd, o->shape);
  cmd->add_option("--runs", o->runs, "Timed runs (median reported)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->warmup, "Untimed warm-up runs")->check(CLI::Range(0, 100));
  add_threads_option(*cmd, o->threads);
  cmd->add_flag("--no-peak", o->no_peak, "Skip measuring the GEMM peak");
  cmd->callback([o] {
    set_threads(o->threads);
    const auto& s = o->shape;
    const bool train = s.mode == "train";
    BertConfig c = resolve_config(s.config);
    Model m = init_model(c, train || s.heads == "pretraining" ? Heads::pretraining : Heads::none, 1);
    RunSpec run;
    run.batch = s.batch;
    run.seq = s.seq;
    run.precision = s.precision;
    // Inference runs the graph; training runs whole optimizer steps (forward, backward, update).
    std::unique_ptr<Executor> infer;
    std::unique_ptr<TrainStepper> stepper;
    BertInputs batch;
    if (train) {
      stepper = std::make_unique<TrainStepper>(m, run, OptimizerConfig{}, 1);
      batch = synthetic_inputs(c, stepper->executor().graph());
    } else {
      Graph g = build_graph(s);
      batch = synthetic_inputs(c, g);
      infer = std::make_unique<Executor>(std::move(g), m.params);
      set_inputs(*infer, batch);
    }
    Executor& ex = train ? stepper->executor() : *infer;
    double flops = 0;
    for (const auto& n : ex.graph().nodes()) flops += node_flops(ex.graph(), n);
    int64_t step = 0;
    auto once = [&] {
      if (train)
        stepper->step(std::span(&batch, 1), ++step, 1e-5f);
      else
        ex.run();
    };

    fmt::print("bench: {} mode={} heads={} batch={} seq={} precision={} threads={}\n", s.config, s.mode,
               train ? "pretraining" : s.heads, s.batch, s.seq, to_string(s.precision), omp_threads());
    fmt::print("  graph: {} nodes, {:.1f} GFLOP per step, activations {:.0f} MB (planned, {:.0f} MB without reuse), packed weights {:.0f} MB\n",
               ex.graph().nodes().size(), flops / 1e9, ex.plan().arena_bytes / 1e6,
               ex.plan().unshared_bytes / 1e6, ex.packed_weight_bytes() / 1e6);
    for (int i = 0; i < o->warmup; ++i) once();
    std::vector<double> secs;
    for (int i = 0; i < o->runs; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      once();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    auto [mn, mx] = std::minmax_element(secs.begin(), secs.end());
    const double med = median(secs), seq_s = s.batch / med;
    fmt::print("  throughput: {:.2f} sequences/s (median of {} runs; min {:.2f}, max {:.2f}); step {:.1f} ms\n",
               seq_s, o->runs, s.batch / *mx, s.batch / *mn, med * 1e3);
    const double gflops = flops / med / 1e9;
    if (o->no_peak) {
      fmt::print("  achieved: {:.1f} GFLOP/s\n", gflops);
    } else {
      auto peak = ops::measure_matmul_peak(s.precision == Precision::bf16, 1.0);
      fmt::print("  achieved: {:.1f} GFLOP/s = {:.0f}% of the measured {} GEMM peak {:.1f} GFLOP/s (oneDNN matmul {}^3)\n",
                 gflops, 100 * gflops / peak.gflops, to_string(s.precision), peak.gflops, peak.n);
    }
    fmt::print("  peak RSS: {:.0f} MB\n", peak_rss_mb());
    fmt::print("  (where the time goes: bertlab profile with the same flags)\n");
  });
}

}  // namespace bertlab::app

// bertlab bench: throughput of a BERT configuration (sequences/s, GFLOP/s, share of the
// measured GEMM peak, peak RSS), median of several timed runs after warm-up.
#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/profile_common.h"
#include "ops/peak.h"
#include "runtime/error.h"
#include "runtime/model.h"
#include "runtime/train_step.h"

namespace bertlab::app {

namespace {

struct BenchOptions {
  ModelShapeOptions shape;
  int runs = 5, warmup = 2, threads = 0;
  bool breakdown = false, no_peak = false;
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
  cmd->add_option("--threads", o->threads, "Compute threads (default: all cores)")->check(CLI::PositiveNumber);
  cmd->add_flag("--breakdown", o->breakdown, "Also print time per op kind");
  cmd->add_flag("--no-peak", o->no_peak, "Skip measuring the GEMM peak");
  cmd->callback([o] {
    set_threads(o->threads);
    const auto& s = o->shape;
    const bool train = s.mode == "train";
    Graph g = build_graph(s);
    BertConfig c = resolve_config(s.config);
    Model m = init_model(c, train || s.heads == "pretraining" ? Heads::pretraining : Heads::none, 1);
    double flops = 0;
    for (const auto& n : g.nodes()) flops += node_flops(g, n);
    RunSpec run;
    run.batch = s.batch;
    run.seq = s.seq;
    // Inference runs the graph; training runs whole optimizer steps (forward, backward, update).
    std::unique_ptr<Executor> infer;
    std::unique_ptr<TrainStepper> stepper;
    BertInputs batch;
    if (train) {
      stepper = std::make_unique<TrainStepper>(m, run, OptimizerConfig{}, 1);
      batch = synthetic_inputs(c, stepper->executor().graph());
    } else {
      batch = synthetic_inputs(c, g);
      infer = std::make_unique<Executor>(std::move(g), m.params);
      set_inputs(*infer, batch);
    }
    Executor& ex = train ? stepper->executor() : *infer;
    int64_t step = 0;
    std::vector<double> node_secs;
    auto once = [&](bool timed_nodes) {
      if (!train) return ex.run(timed_nodes ? &node_secs : nullptr);
      if (!timed_nodes) return (void)stepper->step(std::span(&batch, 1), ++step, 1e-5f);
      // Per-node times of a training step: the same work as step(), node by node.
      stepper->state().grads.zero();
      set_inputs(ex, batch);
      ex.run(&node_secs);
    };

    fmt::print("bench: {} mode={} heads={} batch={} seq={} threads={}\n", s.config, s.mode,
               train ? "pretraining" : s.heads, s.batch, s.seq, omp_threads());
    fmt::print("  graph: {} nodes, {:.1f} GFLOP per step, activations {:.0f} MB (planned, {:.0f} MB without reuse), packed weights {:.0f} MB\n",
               ex.graph().nodes().size(), flops / 1e9, ex.plan().arena_bytes / 1e6,
               ex.plan().unshared_bytes / 1e6, ex.packed_weight_bytes() / 1e6);
    for (int i = 0; i < o->warmup; ++i) once(false);
    std::vector<double> secs;
    std::map<std::string, double> by_kind;
    for (int i = 0; i < o->runs; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      once(false);
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (o->breakdown) {
      for (int i = 0; i < o->runs; ++i) {
        once(true);
        for (size_t k = 0; k < node_secs.size(); ++k)
          by_kind[to_string(ex.graph().node(k).kind)] += node_secs[k] / o->runs;
      }
    }
    auto [mn, mx] = std::minmax_element(secs.begin(), secs.end());
    const double med = median(secs), seq_s = s.batch / med;
    fmt::print("  throughput: {:.2f} sequences/s (median of {} runs; min {:.2f}, max {:.2f}); step {:.1f} ms\n",
               seq_s, o->runs, s.batch / *mx, s.batch / *mn, med * 1e3);
    const double gflops = flops / med / 1e9;
    if (o->no_peak) {
      fmt::print("  achieved: {:.1f} GFLOP/s\n", gflops);
    } else {
      auto peak = ops::measure_matmul_peak(false, 1.0);
      fmt::print("  achieved: {:.1f} GFLOP/s = {:.0f}% of the measured fp32 GEMM peak {:.1f} GFLOP/s (oneDNN matmul {}^3)\n",
                 gflops, 100 * gflops / peak.gflops, peak.gflops, peak.n);
    }
    fmt::print("  peak RSS: {:.0f} MB\n", peak_rss_mb());
    if (o->breakdown) {
      double total = 0;
      for (auto& [k, v] : by_kind) total += v;
      std::vector<std::pair<double, std::string>> rows;
      for (auto& [k, v] : by_kind) rows.emplace_back(v, k);
      std::sort(rows.rbegin(), rows.rend());
      fmt::print("  time by op kind (mean per step, timed runs):\n");
      for (auto& [v, k] : rows) fmt::print("    {:<14} {:8.2f} ms {:5.1f}%\n", k, v * 1e3, 100 * v / total);
    }
  });
}

}  // namespace bertlab::app

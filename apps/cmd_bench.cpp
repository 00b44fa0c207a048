// bertlab bench: throughput of a BERT configuration (sequences/s, GFLOP/s, share of the
// measured GEMM peak, peak RSS), median of several timed runs after warm-up.
#include <fmt/core.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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
  int accum = 1;  // train mode: micro-batches of --batch per optimizer step
  bool no_peak = false;
  OptimizerKind optimizer = OptimizerKind::adamw;  // train mode
  bool optimizer_only = false;      // train mode: time the optimizer's work alone
};

// The high-water mark of the resident set, MiB (ru_maxrss is in KiB on Linux).
double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// bench --mode train --optimizer-only: the optimizer's whole work of one step on the model's
// real parameter, gradient and moment arenas (the executor's optimizer phase: the gradient norm
// for clipping, then the fused AdamW or LAMB update; then the gradient zeroing that starts the
// next step), each part's median time, bytes moved and share of the triad bandwidth measured
// in the same run on arrays as large as the gradient arena.
void bench_optimizer(const BenchOptions& o, TrainStepper& stepper) {
  Executor& ex = stepper.executor();
  const Graph& g = ex.graph();
  ParamStore& grads = stepper.state().grads;
  // Element counts from the graph's optimizer nodes (the trained tensors) and the arena.
  int64_t norm_elems = 0, update_elems = 0;
  std::vector<size_t> norm_nodes, update_nodes;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.kind == OpKind::grad_norm) {
      norm_nodes.push_back(i);
      for (int t : n.inputs) norm_elems += g.tensor(t).numel();
    } else if (n.kind == OpKind::adamw_update || n.kind == OpKind::lamb_update) {
      update_nodes.push_back(i);
      update_elems += g.tensor(n.inputs[0]).numel();
    }
  }
  check(!norm_nodes.empty() && !update_nodes.empty(), "bench --optimizer-only: the training graph has no optimizer nodes");
  const int64_t arena = grads.arena_size();
  // Gradients of a realistic magnitude, restored before every repetition (untimed).
  std::vector<float> saved(static_cast<size_t>(arena));
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1e-3f);
  for (auto& x : saved) x = dist(rng);
  const bool lamb = o.optimizer == OptimizerKind::lamb;
  auto& ctx = ex.context();
  ctx.lr = 1e-5f;
  std::vector<double> norm_s, update_s, zero_s, node_s;
  for (int i = 0; i < o.warmup + o.runs; ++i) {
    std::memcpy(grads.arena(), saved.data(), saved.size() * sizeof(float));
    ctx.step = i + 1;
    ex.run(&node_s, kOptimizer);
    const auto t0 = std::chrono::steady_clock::now();
    grads.zero();
    const double zero = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i < o.warmup) continue;
    double norm = 0, update = 0;
    for (size_t k : norm_nodes) norm += node_s[k];
    for (size_t k : update_nodes) update += node_s[k];
    norm_s.push_back(norm), update_s.push_back(update), zero_s.push_back(zero);
  }
  const int64_t triad_bytes = std::max<int64_t>(arena * int64_t(sizeof(float)), int64_t(64) << 20);
  const auto triad = ops::measure_bandwidth(ops::BandwidthKernel::triad, triad_bytes, 1.0);
  // The pure read and write rates on one such array, for the norm (a read) and the zeroing (a write).
  const auto read = ops::measure_bandwidth(ops::BandwidthKernel::read, triad_bytes, 0.5);
  const auto write = ops::measure_bandwidth(ops::BandwidthKernel::write, triad_bytes, 0.5);
  fmt::print("  optimizer {}: {:.1f} M trained parameters, gradient arena {:.0f} MB; median of {} runs after {} warm-up\n",
             to_string(o.optimizer), update_elems / 1e6, arena * 4 / 1e6, o.runs, o.warmup);
  fmt::print("  triad: {:.1f} GB/s (3 arrays of {:.0f} MB, a = b + s*c, 2 read + 1 written, 90th percentile)\n",
             triad.gbs, triad_bytes / 1e6);
  fmt::print("  read: {:.1f} GB/s, write: {:.1f} GB/s (one array, 90th percentile; the write not counting write-allocate)\n",
             read.gbs, write.gbs);
  struct Part {
    const char* name;
    double seconds, bytes;
    const char* traffic;
  };
  const double f = sizeof(float);
  const Part parts[] = {
      {"norm", median(norm_s), f * norm_elems, "reads g"},
      {to_string(o.optimizer), median(update_s), f * update_elems * (lamb ? 10 : 7),
       lamb ? "pass 1 reads p m v g, writes m v; pass 2 reads p m v, writes p" : "reads p m v g, writes p m v"},
      {"zero", median(zero_s), f * arena, "writes g (the whole arena)"},
  };
  double total_s = 0, total_b = 0;
  for (const Part& p : parts) {
    const double gbs = p.bytes / p.seconds / 1e9;
    fmt::print("  {:<6} {:8.2f} ms {:8.0f} MB {:7.1f} GB/s = {:4.0f}% of triad   ({})\n", p.name, p.seconds * 1e3,
               p.bytes / 1e6, gbs, 100 * gbs / triad.gbs, p.traffic);
    total_s += p.seconds, total_b += p.bytes;
  }
  const double gbs = total_b / total_s / 1e9;
  fmt::print("  total  {:8.2f} ms {:8.0f} MB {:7.1f} GB/s = {:4.0f}% of triad\n", total_s * 1e3, total_b / 1e6, gbs,
             100 * gbs / triad.gbs);
}

}  // namespace

void add_bench_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("bench", "Measure throughput of a BERT configuration");
  auto o = std::make_shared<BenchOptions>();
  o->shape.heads = Heads::none;
  add_model_shape_options(*cmd, o->shape);
  cmd->add_option("--runs", o->runs, "Timed runs (median reported)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->warmup, "Untimed warm-up runs")->check(CLI::Range(0, 100));
  add_threads_option(*cmd, o->threads);
  cmd->add_flag("--no-peak", o->no_peak, "Skip measuring the GEMM peak");
  CLI::Option* accum = cmd->add_option("--accum-steps", o->accum,
                                       "Training: micro-batches of --batch per optimizer step (gradient accumulation)")
                           ->check(CLI::Range(1, 1024));
  CLI::Option* optimizer = add_enum_option(*cmd, "--optimizer", o->optimizer, "Training: adamw or lamb");
  cmd->add_flag("--optimizer-only", o->optimizer_only,
                "Training: time the optimizer's work alone (gradient norm, update, gradient zeroing) "
                "against the triad bandwidth");
  cmd->callback([o, optimizer, accum] {
    set_threads(o->threads);
    const auto& s = o->shape;
    const bool train = s.mode == RunMode::train;
    if (!train && (o->optimizer_only || optimizer->count() > 0 || accum->count() > 0))
      fail("--optimizer, --optimizer-only and --accum-steps need --mode train (got --mode {})", to_string(s.mode));
    BertConfig c = resolve_config(s.config);
    const Heads heads = graph_heads(s);
    Model m = init_model(c, heads, 1);
    RunSpec run;
    run.batch = s.batch;
    run.seq = s.seq;
    run.precision = s.precision;
    // Inference runs the graph; training runs whole optimizer steps (forward, backward, update).
    std::unique_ptr<Executor> infer;
    std::unique_ptr<TrainStepper> stepper;
    BertInputs batch;
    std::vector<BertInputs> micro;  // training: the step's micro-batches (copies of one batch)
    if (train) {
      OptimizerConfig opt;
      opt.kind = o->optimizer;
      stepper = std::make_unique<TrainStepper>(m, run, opt, 1);
      batch = synthetic_inputs(c, stepper->executor().graph());
      micro.assign(static_cast<size_t>(o->accum), batch);
    } else {
      Graph g = build_graph(s);
      batch = synthetic_inputs(c, g);
      infer = std::make_unique<Executor>(std::move(g), m.params);
      set_inputs(*infer, batch);
    }
    Executor& ex = train ? stepper->executor() : *infer;
    // Model FLOPs: what the step must compute. Forward nodes re-run in the backward to save
    // memory (attribute "recomputed") are extra work, counted apart, as the model-FLOPs
    // utilisation of training reports usually count them.
    // With --accum-steps K, forward and backward run K times per step, the update once.
    double flops = 0, recomputed_flops = 0;
    for (const auto& n : ex.graph().nodes()) {
      const bool per_micro = n.phase == Phase::forward || n.phase == Phase::backward;
      const double times = train && per_micro ? o->accum : 1;
      (is_recomputation(n) ? recomputed_flops : flops) += times * node_flops(ex.graph(), n);
    }
    int64_t step = 0;
    auto once = [&] {
      if (train)
        stepper->step(micro, ++step, 1e-5f);
      else
        ex.run();
    };

    fmt::print("bench: {} mode={} heads={} batch={} seq={} precision={} threads={}{}\n", s.config, to_string(s.mode),
               to_string(heads), s.batch, s.seq, to_string(s.precision), omp_threads(),
               o->accum > 1 ? fmt::format(" accum={}", o->accum) : std::string());
    fmt::print("  graph: {} nodes, {:.1f} GFLOP per step (+{:.1f} recomputed), activations {:.0f} MB (planned, {:.0f} MB without reuse), packed weights {:.0f} MB\n",
               ex.graph().nodes().size(), flops / 1e9, recomputed_flops / 1e9, ex.plan().arena_bytes / 1e6,
               ex.plan().unshared_bytes / 1e6, ex.packed_weight_bytes() / 1e6);
    if (o->optimizer_only) {
      bench_optimizer(*o, *stepper);
      fmt::print("  peak RSS: {:.0f} MiB\n", peak_rss_mib());
      return;
    }
    for (int i = 0; i < o->warmup; ++i) once();
    std::vector<double> secs;
    for (int i = 0; i < o->runs; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      once();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // The model's high-water mark, read before the GEMM peak below allocates its own matrices.
    const double rss_mib = peak_rss_mib();
    auto [mn, mx] = std::minmax_element(secs.begin(), secs.end());
    const double seqs = double(s.batch) * (train ? o->accum : 1);  // sequences per step
    const double med = median(secs), seq_s = seqs / med;
    fmt::print("  throughput: {:.2f} sequences/s (median of {} runs; min {:.2f}, max {:.2f}); step {:.1f} ms\n",
               seq_s, o->runs, seqs / *mx, seqs / *mn, med * 1e3);
    if (train && o->accum > 1)
      fmt::print("  weights packed or cast once per step for its {} micro-batches: {:.0f} MB kept\n", o->accum,
                 stepper->executor().kept_weight_bytes() / 1e6);
    if (train && stepper->executor().kept_x_bytes() > 0)
      fmt::print("  bf16 copies of x kept from the forward pass for the dW GEMMs: {:.1f} MB\n",
                 stepper->executor().kept_x_bytes() / 1e6);
    const double gflops = flops / med / 1e9;
    if (o->no_peak) {
      fmt::print("  achieved: {:.1f} GFLOP/s\n", gflops);
    } else {
      // The best of three 1 s passes: on a shared machine one pass can fall in a slow second
      // and put the share above 100% (seen: 116% of a 224.5 GFLOP/s bf16 "peak").
      ops::PeakResult peak;
      for (int pass = 0; pass < 3; ++pass) {
        const auto p = ops::measure_matmul_peak(s.precision == Precision::bf16, 1.0);
        if (p.gflops > peak.gflops) peak = p;
      }
      fmt::print("  achieved: {:.1f} GFLOP/s = {:.0f}% of the measured {} GEMM peak {:.1f} GFLOP/s (oneDNN matmul {}^3, "
                 "best of 3 passes)\n",
                 gflops, 100 * gflops / peak.gflops, to_string(s.precision), peak.gflops, peak.n);
    }
    fmt::print("  peak RSS: {:.0f} MiB\n", rss_mib);
    fmt::print("  (where the time goes: bertlab profile with the same flags)\n");
  });
}

}  // namespace bertlab::app

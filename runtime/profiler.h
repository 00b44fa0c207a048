#pragma once
// The profiler: times every node of a graph with the executor's own node timing, and reports
// per node (time, FLOPs, bytes, GFLOP/s, GB/s, arithmetic intensity, roofline bound from
// machine.json, efficiency), per category (summing to the measured step, with an explicit
// "unattributed" row), per layer and per phase. Also exports Chrome traces; sweeps and their
// CSV, HTML and markdown reports are report/sweep.h. Nothing here prints.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/executor.h"
#include "runtime/graph.h"
#include "runtime/machine.h"

namespace bertlab {

// to_string(ProfileCategory), op_table.h: the stable id ("gemm_linear", ...).
const char* category_label(ProfileCategory c);  // for people: "projection/FFN GEMMs", ...
ProfileCategory profile_category_of(OpKind k);
bool is_gemm(ProfileCategory c);
// "encoder.3" for any node whose name contains "encoder.3."; else the first name component.
std::string layer_of(const std::string& node_name);

// Roofline of one precision: time >= max(flops / peak, bytes / bandwidth).
struct Roofline {
  double peak_gflops = 0;    // GEMM peak of the precision (machine.json gemm_peak_gflops)
  double bandwidth_gbs = 0;  // sustained triad bandwidth (machine.json bandwidth_gbs.triad)
  double bound_seconds(double flops, double bytes) const;
  double ridge_intensity() const { return peak_gflops / bandwidth_gbs; }  // FLOP per byte
};
Roofline roofline_for(const MachineInfo& m, Precision precision);

struct NodeProfile {
  int id = -1;
  std::string name, layer;
  OpKind kind{};
  Phase phase{};
  ProfileCategory category{};
  double seconds = 0;        // per step
  double flops = 0, bytes = 0;  // per step (node_flops, node_min_bytes)
  double bound_seconds = 0;  // roofline lower bound
  bool compute_bound = false;  // intensity at or above the ridge point

  double gflops() const { return seconds > 0 ? flops / seconds / 1e9 : 0; }
  double gbs() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  // Share of the roofline bound achieved: bound / measured (above 1 when the data stays in
  // cache, since the memory roof is DRAM bandwidth).
  double efficiency() const { return seconds > 0 ? bound_seconds / seconds : 0; }
};

struct BreakdownRow {
  std::string key, label;
  double seconds = 0, flops = 0, bytes = 0;
  int nodes = 0;
};

struct Profile {
  nlohmann::json run = nlohmann::json::object();  // config, mode, batch, seq, precision, accum
  double step_seconds = 0;  // mean of the kept runs (those not slower than the median)
  double step_median_seconds = 0, step_min_seconds = 0, step_max_seconds = 0;  // all timed runs
  int runs = 0, kept_runs = 0;
  int accum = 1;  // micro-batches per step (training)
  Roofline roof;
  std::vector<NodeProfile> nodes;        // graph order
  std::vector<BreakdownRow> categories;  // every ProfileCategory in enum order; sums to step
  std::vector<BreakdownRow> layers;      // first-appearance order, then "unattributed"
  std::vector<BreakdownRow> phases;      // forward, backward, optimizer, communication, unattributed

  double total_flops() const;
  double gemm_seconds() const;  // the four GEMM categories
};

// Builds a profile from measured times: `node_seconds[i]` is node i's total time in the step
// and `step_seconds` the measured step. With accum > 1 (a training step of `accum`
// micro-batches) forward and backward nodes ran accum times, so their FLOPs and bytes count
// accum times; optimizer and communication nodes once.
Profile make_profile(const Graph& g, const std::vector<double>& node_seconds, double step_seconds,
                     const Roofline& roof, int accum = 1);

struct ProfileOptions {
  int warmup = 1;  // untimed steps
  int runs = 5;    // timed steps with node timing
  int accum = 1;   // training: forward+backward `accum` times, then the optimizer once
};
// Runs `warmup` + `runs` steps, timing every node with the executor's node timing; step and
// node times are the mean over the runs whose step time is not above the median (interference
// from other processes on a shared machine only ever slows runs down). `start_step` (e.g.
// zeroing the gradients of a training step) runs at the start of each step, inside the timed
// step and outside every node, so it shows as unattributed.
Profile profile_executor(Executor& ex, const Roofline& roof, const ProfileOptions& o,
                         const std::function<void()>& start_step = {});

// Cost of node timing: interleaved runs with and without it, medians of each.
struct TimingOverhead {
  double untimed_seconds = 0, timed_seconds = 0;
  int runs = 0;
  double fraction() const { return timed_seconds / untimed_seconds - 1; }
};
TimingOverhead measure_timing_overhead(Executor& ex, int runs, int accum = 1,
                                      const std::function<void()>& start_step = {});

// Per node, per category, per layer and per phase, with the step time and the roofline.
nlohmann::json profile_to_json(const Profile& p);
// Chrome trace event format (chrome://tracing, Perfetto): one complete ("X") event per node,
// laid end to end in graph order, with FLOPs, bytes and roofline figures as args.
nlohmann::json profile_chrome_trace(const Profile& p);

}  // namespace bertlab

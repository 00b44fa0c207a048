#include "runtime/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <regex>
#include <set>
#include <sstream>

#include "base/error.h"

namespace bertlab {

const char* category_label(ProfileCategory c) {
#define BERTLAB_PROFILE_CATEGORY_LABEL(id, name, label) label,
  static constexpr std::array<const char*, kProfileCategoryCount> kLabels{BERTLAB_PROFILE_CATEGORIES(BERTLAB_PROFILE_CATEGORY_LABEL)};
#undef BERTLAB_PROFILE_CATEGORY_LABEL
  return kLabels.at(static_cast<size_t>(c));
}

ProfileCategory profile_category_of(OpKind k) { return op_info(k).profile; }

bool is_gemm(ProfileCategory c) {
  return c == ProfileCategory::gemm_linear || c == ProfileCategory::gemm_attention ||
         c == ProfileCategory::gemm_dx || c == ProfileCategory::gemm_dw;
}

std::string layer_of(const std::string& name) {
  static const std::regex layer(R"((^|\.)encoder\.(\d+)\.)");
  std::smatch m;
  if (std::regex_search(name, m, layer)) return "encoder." + m[2].str();
  return name.substr(0, name.find('.'));
}

double Roofline::bound_seconds(double flops, double bytes) const {
  return std::max(flops / (peak_gflops * 1e9), bytes / (bandwidth_gbs * 1e9));
}

Roofline roofline_for(const MachineInfo& m, Precision precision) {
  return {m.gemm_peak(precision), m.bandwidth_triad};
}

double Profile::total_flops() const {
  double f = 0;
  for (const auto& n : nodes) f += n.flops;
  return f;
}

double Profile::gemm_seconds() const {
  double s = 0;
  for (size_t c = 0; c < categories.size(); ++c)
    if (is_gemm(static_cast<ProfileCategory>(c))) s += categories[c].seconds;
  return s;
}

Profile make_profile(const Graph& g, const std::vector<double>& node_seconds, double step_seconds,
                     const Roofline& roof, int accum) {
  check(node_seconds.size() == g.nodes().size(), "profile: {} node times for a graph of {} nodes",
        node_seconds.size(), g.nodes().size());
  check(accum >= 1, "accum must be at least 1, got {}", accum);
  check(roof.peak_gflops > 0 && roof.bandwidth_gbs > 0, "profile: roofline needs a positive peak and bandwidth");
  Profile p;
  p.roof = roof;
  p.accum = accum;
  p.run = g.meta.value("run", nlohmann::json::object());
  p.run["accum"] = accum;

  double unattributed = step_seconds;
  for (const auto& n : g.nodes()) {
    NodeProfile np;
    np.id = n.id;
    np.name = n.name;
    np.layer = layer_of(n.name);
    np.kind = n.kind;
    np.phase = n.phase;
    np.category = profile_category_of(n.kind);
    const bool per_micro_batch = n.phase == Phase::forward || n.phase == Phase::backward;
    const double times = per_micro_batch ? accum : 1;
    np.seconds = node_seconds[n.id];
    np.flops = node_flops(g, n) * times;
    np.bytes = static_cast<double>(node_min_bytes(g, n)) * times;
    np.bound_seconds = roof.bound_seconds(np.flops, np.bytes);
    np.compute_bound = np.intensity() >= roof.ridge_intensity();
    unattributed -= np.seconds;
    p.nodes.push_back(std::move(np));
  }
  p.step_seconds = step_seconds;

  for (size_t c = 0; c < kProfileCategoryCount; ++c) {
    auto cat = static_cast<ProfileCategory>(c);
    p.categories.push_back({to_string(cat), category_label(cat), 0, 0, 0, 0});
  }
  auto add_to = [](BreakdownRow& r, const NodeProfile& n) {
    r.seconds += n.seconds;
    r.flops += n.flops;
    r.bytes += n.bytes;
    r.nodes += 1;
  };
  std::map<std::string, size_t> layer_index;
  for (size_t ph = 0; ph < 4; ++ph) {
    const char* name = to_string(static_cast<Phase>(ph));
    p.phases.push_back({name, name, 0, 0, 0, 0});
  }
  for (const auto& n : p.nodes) {
    add_to(p.categories[static_cast<size_t>(n.category)], n);
    add_to(p.phases[static_cast<size_t>(n.phase)], n);
    auto [it, fresh] = layer_index.emplace(n.layer, p.layers.size());
    if (fresh) p.layers.push_back({n.layer, n.layer, 0, 0, 0, 0});
    add_to(p.layers[it->second], n);
  }
  p.categories[static_cast<size_t>(ProfileCategory::unattributed)].seconds = unattributed;
  p.layers.push_back({"unattributed", "unattributed", unattributed, 0, 0, 0});
  p.phases.push_back({"unattributed", "unattributed", unattributed, 0, 0, 0});
  return p;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// One step: inference runs the graph once; training runs forward and backward `accum` times,
// then the optimizer (and communication) once. Node times add up over the micro-batches.
void run_step(Executor& ex, int accum, const std::function<void()>& start_step,
              std::vector<double>* node_seconds) {
  if (start_step) start_step();
  if (!ex.training()) {
    check(accum == 1, "accum {}: gradient accumulation needs a training graph", accum);
    ex.run(node_seconds);
    return;
  }
  std::vector<double> part;
  if (node_seconds) node_seconds->assign(ex.graph().nodes().size(), 0.0);
  auto add = [&] {
    if (node_seconds)
      for (size_t i = 0; i < part.size(); ++i) (*node_seconds)[i] += part[i];
  };
  ex.context().weights_version = accum > 1 ? next_weights_version() : 0;  // as TrainStepper::step
  for (int micro = 0; micro < accum; ++micro) {
    ex.context().micro = micro;
    ex.run(node_seconds ? &part : nullptr, kForward | kBackward);
    add();
  }
  ex.run(node_seconds ? &part : nullptr, kAllPhases & ~(kForward | kBackward));
  add();
}
}  // namespace

Profile profile_executor(Executor& ex, const Roofline& roof, const ProfileOptions& o,
                         const std::function<void()>& start_step) {
  check(o.runs >= 1, "profile: at least one timed run needed, got {}", o.runs);
  for (int i = 0; i < o.warmup; ++i) run_step(ex, o.accum, start_step, nullptr);
  std::vector<double> steps;
  std::vector<std::vector<double>> per_run;
  std::vector<double> node_secs;
  for (int i = 0; i < o.runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run_step(ex, o.accum, start_step, &node_secs);
    steps.push_back(seconds_since(t0));
    per_run.push_back(node_secs);
  }
  const double med = median_of(steps);
  std::vector<double> node_mean(ex.graph().nodes().size(), 0.0);
  double step_mean = 0;
  int kept = 0;
  for (int i = 0; i < o.runs; ++i) {
    if (steps[i] > med) continue;
    ++kept;
    step_mean += steps[i];
    for (size_t k = 0; k < node_mean.size(); ++k) node_mean[k] += per_run[i][k];
  }
  step_mean /= kept;
  for (double& s : node_mean) s /= kept;
  Profile p = make_profile(ex.graph(), node_mean, step_mean, roof, o.accum);
  p.runs = o.runs;
  p.kept_runs = kept;
  p.step_median_seconds = med;
  p.step_min_seconds = *std::min_element(steps.begin(), steps.end());
  p.step_max_seconds = *std::max_element(steps.begin(), steps.end());
  return p;
}

TimingOverhead measure_timing_overhead(Executor& ex, int runs, int accum,
                                      const std::function<void()>& start_step) {
  check(runs >= 1, "timing overhead: at least one run needed, got {}", runs);
  run_step(ex, accum, start_step, nullptr);
  std::vector<double> off, on, node_secs;
  for (int i = 0; i < runs; ++i) {
    // Alternate which goes first so slow drift does not favour one side.
    for (int pass = 0; pass < 2; ++pass) {
      bool timed = (pass == 0) == (i % 2 == 0);
      auto t0 = std::chrono::steady_clock::now();
      run_step(ex, accum, start_step, timed ? &node_secs : nullptr);
      (timed ? on : off).push_back(seconds_since(t0));
    }
  }
  return {median_of(off), median_of(on), runs};
}

namespace {
nlohmann::json rows_json(const std::vector<BreakdownRow>& rows, double step) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"key", r.key}, {"label", r.label}, {"seconds", r.seconds},
                   {"share", step > 0 ? r.seconds / step : 0}, {"flops", r.flops},
                   {"bytes", r.bytes}, {"nodes", r.nodes}});
  return out;
}
}  // namespace

nlohmann::json profile_to_json(const Profile& p) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : p.nodes)
    nodes.push_back({{"id", n.id}, {"name", n.name}, {"layer", n.layer}, {"op", to_string(n.kind)},
                     {"phase", to_string(n.phase)}, {"category", to_string(n.category)},
                     {"seconds", n.seconds}, {"share", n.seconds / p.step_seconds},
                     {"flops", n.flops}, {"bytes", n.bytes}, {"gflops", n.gflops()},
                     {"gbs", n.gbs()}, {"intensity", n.intensity()},
                     {"bound_seconds", n.bound_seconds}, {"bound", n.compute_bound ? "compute" : "memory"},
                     {"efficiency", n.efficiency()}});
  return {{"format", "bertlab-profile"},
          {"version", 1},
          {"run", p.run},
          {"step_seconds", p.step_seconds},
          {"step_stats", {{"runs", p.runs}, {"kept_runs", p.kept_runs},
                          {"median_seconds", p.step_median_seconds},
                          {"min_seconds", p.step_min_seconds}, {"max_seconds", p.step_max_seconds},
                          {"accum", p.accum}}},
          {"total_flops", p.total_flops()},
          {"roofline", {{"peak_gflops", p.roof.peak_gflops}, {"bandwidth_gbs", p.roof.bandwidth_gbs},
                        {"ridge_flops_per_byte", p.roof.ridge_intensity()}}},
          {"categories", rows_json(p.categories, p.step_seconds)},
          {"phases", rows_json(p.phases, p.step_seconds)},
          {"layers", rows_json(p.layers, p.step_seconds)},
          {"nodes", nodes}};
}

nlohmann::json profile_chrome_trace(const Profile& p) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1},
                    {"args", {{"name", "bertlab executor"}}}});
  double ts_us = 0;
  for (const auto& n : p.nodes) {
    const double dur_us = n.seconds * 1e6;
    events.push_back({{"name", n.name}, {"cat", to_string(n.category)}, {"ph", "X"},
                      {"ts", ts_us}, {"dur", dur_us}, {"pid", 1}, {"tid", 1},
                      {"args", {{"op", to_string(n.kind)}, {"phase", to_string(n.phase)},
                                {"layer", n.layer}, {"flops", n.flops}, {"bytes", n.bytes},
                                {"gflops", n.gflops()}, {"gbs", n.gbs()},
                                {"intensity", n.intensity()},
                                {"bound_us", n.bound_seconds * 1e6},
                                {"efficiency", n.efficiency()}}}});
    ts_us += dur_us;
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"run", p.run.dump()},
                         {"step_us", p.step_seconds * 1e6},
                         {"note", "node times are the mean of the kept runs, laid end to end in "
                                  "graph order; the step's unattributed time is not drawn"}}}};
}

}  // namespace bertlab

// bertlab profile: where a BERT step spends its time. Times every node, breaks the measured
// step down by category (adding up to the step, unattributed time shown), phase, layer and
// top nodes, with roofline figures from machine.json; exports JSON, a Chrome trace, and for
// sweeps a CSV, an HTML report with SVG charts and a Markdown summary.
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "apps/commands.h"
#include "apps/common.h"
#include "apps/profile_common.h"
#include "base/error.h"
#include "runtime/model.h"
#include "report/sweep.h"
#include "runtime/profiler.h"

namespace bertlab::app {

namespace {

struct ProfileCliOptions {
  ModelShapeOptions shape;
  std::string machine = "machine.json";
  std::string json, trace, csv, html, markdown;
  std::vector<std::string> sweeps;
  int runs = 5, warmup = 1, accum = 1, top = 10, threads = 0;
  bool overhead = false, heads_given = false;
};

// Throws when the machine cannot run (or machine.json has no peak for) the precision; sweeps
// record the message as the reason for skipping the point.
void check_precision_supported(const MachineInfo& machine, Precision precision) { machine.gemm_peak(precision); }

struct ModelCache {
  std::map<Heads, Model> by_heads;
  Model& get(const BertConfig& c, Heads heads) {
    auto it = by_heads.find(heads);
    if (it == by_heads.end()) it = by_heads.emplace(heads, init_model(c, heads, 1)).first;
    return it->second;
  }
};

ModelShapeOptions shape_for(const ProfileCliOptions& o, const SweepPoint& p) {
  ModelShapeOptions s = o.shape;
  s.mode = enum_from_string<RunMode>(p.at(SweepKey::mode), "--sweep mode");
  s.batch = std::stoll(p.at(SweepKey::batch));
  s.seq = std::stoll(p.at(SweepKey::seq));
  s.precision = precision_from_string(p.at(SweepKey::precision));
  if (!o.heads_given) s.heads = s.mode == RunMode::train ? Heads::pretraining : Heads::none;
  return s;
}

Profile profile_point(const ProfileCliOptions& o, const SweepPoint& p, const MachineInfo& machine,
                      ModelCache& models, std::optional<TimingOverhead>* overhead) {
  const auto s = shape_for(o, p);
  const int accum = std::stoi(p.at(SweepKey::accum));
  check(accum == 1 || s.mode == RunMode::train, "accum {}: gradient accumulation applies to --mode train only", accum);
  Graph g = build_graph(s);
  BertConfig c = resolve_config(s.config);
  Model& model = models.get(c, graph_heads(s));
  std::optional<TrainingState> state;
  if (s.mode == RunMode::train) state.emplace(model.params);
  Executor ex(std::move(g), model.params, state ? &*state : nullptr);
  set_inputs(ex, synthetic_inputs(c, ex.graph()));
  ProfileOptions po;
  po.runs = o.runs;
  po.warmup = o.warmup;
  po.accum = accum;
  // A training step starts by zeroing the gradient arena: timed, outside any node.
  std::function<void()> start_step;
  if (state) start_step = [&state] { state->grads.zero(); };
  Profile prof = profile_executor(ex, roofline_for(machine, s.precision), po, start_step);
  prof.run["config"] = s.config;
  prof.run["precision"] = p.at(SweepKey::precision);
  prof.run["threads"] = omp_threads();
  if (overhead) *overhead = measure_timing_overhead(ex, std::max(o.runs, 5), accum, start_step);
  return prof;
}

double pct(double part, double whole) { return whole > 0 ? 100 * part / whole : 0; }

void print_rows(const std::vector<BreakdownRow>& rows, double step, const char* title, bool skip_empty) {
  fmt::print("\n  {:<26} {:>9} {:>7} {:>9} {:>9} {:>9} {:>5}\n", title, "ms", "% step", "GFLOP", "GFLOP/s",
             "MB", "nodes");
  double sum = 0;
  for (const auto& r : rows) {
    sum += r.seconds;
    if (skip_empty && r.nodes == 0 && r.seconds == 0) continue;
    fmt::print("  {:<26} {:>9.2f} {:>6.1f}% {:>9.2f} {:>9.1f} {:>9.1f} {:>5}\n", r.label, r.seconds * 1e3,
               pct(r.seconds, step), r.flops / 1e9, r.seconds > 0 ? r.flops / r.seconds / 1e9 : 0.0,
               r.bytes / 1e6, r.nodes);
  }
  fmt::print("  {:<26} {:>9.2f} {:>6.1f}%\n", "total (= measured step)", sum * 1e3, pct(sum, step));
}

void print_profile(const Profile& p, const ProfileCliOptions& o, bool full) {
  const double step = p.step_seconds;
  fmt::print("  step: {:.2f} ms (mean of the {} of {} timed runs not slower than the median; median {:.2f}, "
             "min {:.2f}, max {:.2f} ms){}\n",
             step * 1e3, p.kept_runs, p.runs, p.step_median_seconds * 1e3, p.step_min_seconds * 1e3,
             p.step_max_seconds * 1e3,
             p.accum > 1 ? fmt::format("; {} micro-batches per step", p.accum) : "");
  fmt::print("  {:.2f} GFLOP per step, {:.1f} GFLOP/s; GEMMs {:.1f}% of the step\n", p.total_flops() / 1e9,
             p.total_flops() / step / 1e9, pct(p.gemm_seconds(), step));
  print_rows(p.categories, step, "category", true);
  if (!full) return;
  print_rows(p.phases, step, "phase", true);
  print_rows(p.layers, step, "layer", false);
  std::vector<const NodeProfile*> top;
  for (const auto& n : p.nodes) top.push_back(&n);
  std::sort(top.begin(), top.end(), [](auto* a, auto* b) { return a->seconds > b->seconds; });
  top.resize(std::min<size_t>(top.size(), static_cast<size_t>(o.top)));
  fmt::print("\n  top {} nodes {:<44} {:<18} {:>8} {:>6} {:>8} {:>7} {:>7} {:>7} {:>6}\n", top.size(), "",
             "op", "ms", "%", "GFLOP/s", "GB/s", "FLOP/B", "bound", "eff");
  for (auto* n : top)
    fmt::print("  {:<58} {:<18} {:>8.3f} {:>5.1f}% {:>8.1f} {:>7.1f} {:>7.2f} {:>7} {:>5.0f}%\n", n->name,
               to_string(n->kind), n->seconds * 1e3, pct(n->seconds, step), n->gflops(), n->gbs(),
               n->intensity(), n->compute_bound ? "compute" : "memory", 100 * n->efficiency());
  fmt::print("  (eff = roofline bound / measured; the memory roof is DRAM triad bandwidth, so ops whose\n"
             "   data stays in cache can exceed 100%)\n");
}

nlohmann::json sweep_json(const std::vector<SweepEntry>& entries) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : entries) {
    nlohmann::json j = {{"point", sweep_point_json(e.point)}};
    if (e.profile) j["profile"] = profile_to_json(*e.profile);
    else j["skipped"] = e.skipped;
    out.push_back(j);
  }
  return {{"format", "bertlab-profile-sweep"}, {"version", 1}, {"entries", out}};
}

}  // namespace

void add_profile_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("profile", "Break a BERT step down by category, layer and node, with roofline");
  auto o = std::make_shared<ProfileCliOptions>();
  add_model_shape_options(*cmd, o->shape);
  cmd->add_option("--accum", o->accum, "Micro-batches per optimizer step (train)")->check(positive_number());
  cmd->add_option("--machine", o->machine, "machine.json from `bertlab calibrate` (default ./machine.json)");
  cmd->add_option("--runs", o->runs, "Timed runs (default 5)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", o->warmup, "Untimed warm-up runs (default 1)")->check(CLI::Range(0, 100));
  cmd->add_option("--top", o->top, "Nodes listed (default 10)")->check(CLI::Range(0, 100000));
  add_threads_option(*cmd, o->threads);
  cmd->add_option("--json", o->json, "Write the breakdown (per node, category, layer, phase) as JSON");
  cmd->add_option("--trace", o->trace, "Write a Chrome trace (chrome://tracing, Perfetto)");
  cmd->add_option("--csv", o->csv, "Write the category breakdown per configuration as CSV");
  cmd->add_option("--html", o->html, "Write a self-contained HTML report with SVG charts");
  cmd->add_option("--markdown", o->markdown, "Write Markdown summary tables");
  cmd->add_option("--sweep", o->sweeps,
                  fmt::format("key=v1,v2 with key in {} (repeatable)", fmt::join(enum_names(SweepKey{}), ", ")));
  cmd->add_flag("--overhead", o->overhead, "Also measure the cost of node timing (runs with and without it)");
  cmd->callback([o, cmd] {
    o->heads_given = cmd->count("--heads") > 0;
    set_threads(o->threads);
    MachineInfo machine = load_machine(o->machine);
    for (auto [path, opt] : {std::pair{o->json, "--json"}, {o->trace, "--trace"}, {o->csv, "--csv"},
                             {o->html, "--html"}, {o->markdown, "--markdown"}})
      check_output_writable(path, opt);
    if (machine.threads != omp_threads())
      fmt::print(stderr, "note: {} was calibrated with {} threads, profiling with {}\n", o->machine,
                 machine.threads, omp_threads());

    std::vector<SweepPoint> points = parse_sweeps(o->sweeps);
    const SweepPoint defaults{{SweepKey::mode, to_string(o->shape.mode)},
                              {SweepKey::batch, std::to_string(o->shape.batch)},
                              {SweepKey::seq, std::to_string(o->shape.seq)},
                              {SweepKey::precision, to_string(o->shape.precision)},
                              {SweepKey::accum, std::to_string(o->accum)}};
    for (auto& p : points)
      for (const auto& [k, v] : defaults) p.emplace(k, v);
    const bool single = points.size() == 1;
    check(single || o->trace.empty(), "--trace needs a single configuration, the sweep has {}", points.size());

    ModelCache models;
    std::vector<SweepEntry> entries;
    std::optional<TimingOverhead> overhead;
    for (const auto& p : points) {
      SweepEntry e{p, std::nullopt, ""};
      const auto s = shape_for(*o, p);
      fmt::print("profile: {} mode={} heads={} batch={} seq={} precision={} accum={} threads={}\n", s.config,
                 to_string(s.mode), to_string(graph_heads(s)), s.batch, s.seq, p.at(SweepKey::precision),
                 p.at(SweepKey::accum), omp_threads());
      if (single) {
        check_precision_supported(machine, s.precision);
      } else {
        try {
          check_precision_supported(machine, s.precision);
        } catch (const Error& err) {
          e.skipped = err.what();
          fmt::print("  skipped: {}\n", e.skipped);
          entries.push_back(e);
          continue;
        }
      }
      e.profile = profile_point(*o, p, machine, models, o->overhead && !overhead ? &overhead : nullptr);
      fmt::print("  roofline ({}): GEMM peak {:.1f} GFLOP/s, triad {:.1f} GB/s, ridge {:.1f} FLOP/B ({}, {})\n",
                 p.at(SweepKey::precision), e.profile->roof.peak_gflops, e.profile->roof.bandwidth_gbs,
                 e.profile->roof.ridge_intensity(), o->machine, machine.date);
      print_profile(*e.profile, *o, single);
      entries.push_back(std::move(e));
    }
    if (overhead)
      fmt::print("\nnode timing overhead (first configuration, medians of {} interleaved runs each): "
                 "{:.2f} ms without, {:.2f} ms with: {:+.2f}%\n",
                 overhead->runs, overhead->untimed_seconds * 1e3, overhead->timed_seconds * 1e3,
                 100 * overhead->fraction());

    auto wrote = [](const std::string& path) {
      if (path != "-") fmt::print("wrote {}\n", path);
    };
    if (!o->json.empty()) {
      auto j = single ? profile_to_json(*entries[0].profile) : sweep_json(entries);
      if (overhead)
        j["timing_overhead"] = {{"untimed_seconds", overhead->untimed_seconds},
                                {"timed_seconds", overhead->timed_seconds},
                                {"runs", overhead->runs},
                                {"fraction", overhead->fraction()}};
      write_json_output(o->json, j);
      wrote(o->json);
    }
    if (!o->trace.empty()) {
      write_text_atomically(o->trace, profile_chrome_trace(*entries[0].profile).dump() + "\n");
      wrote(o->trace);
    }
    if (!o->csv.empty()) {
      write_text_atomically(o->csv, sweep_csv(entries));
      wrote(o->csv);
    }
    const std::string title = fmt::format("bertlab profile: {}", o->shape.config);
    if (!o->html.empty()) {
      write_text_atomically(o->html, html_report(entries, machine, title));
      wrote(o->html);
    }
    if (!o->markdown.empty()) {
      write_text_atomically(o->markdown, markdown_report(entries, machine));
      wrote(o->markdown);
    }
  });
}

}  // namespace bertlab::app

// bertlab estimate: replays an op graph on an accelerator (or CPU) description and reports
// time and off-chip traffic per node and end to end, RWMA against BWMA (docs/hwmodel.md; any
// arrangement of the table with --arrangement NAME or all). On
// a cpu description, --compare-profile checks the estimate against `bertlab profile --json`.
#include <fmt/core.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "apps/commands.h"
#include "apps/common.h"
#include "hwmodel/cluster.h"
#include "hwmodel/estimate.h"
#include "hwmodel/profile_compare.h"
#include "base/error.h"
#include "base/json_file.h"
#include "runtime/fusion.h"

namespace bertlab::app {

namespace {

struct EstimateOptions {
  std::string graph, config, system, arrangement = "both", csv, json, explain, nodes, paper_table, cluster;
  int64_t accum = 1;
  Precision precision = Precision::fp32;
  std::string heads = "pretraining", compare_profile;
  int64_t batch = 1, seq = 128;
  bool train = false, precision_given = false, nsp = true;
  int top = 10;
  std::vector<int64_t> kernels, cores;
  int bench = 0;
  bool bench_detail = false;
  hw::CoreWalk walk = hw::CoreWalk::exact;  // --walk: overrides the system's core.walk
  bool walk_given = false;
};

Graph load_graph_file(const std::string& path) {
  const auto j = read_json_file(path, "graph file");
  try {
    Graph g = graph_from_json(j);
    check(!g.nodes().empty(), "field 'nodes' is empty: there is nothing to estimate");
    // meta.run.precision says which graph the builder made (its GEMMs' attrs.precision say how
    // each multiplies): a value that names no precision is an error, not ignored.
    if (g.meta.is_object() && g.meta.contains("run") && g.meta["run"].is_object() && g.meta["run"].contains("precision")) {
      const auto& p = g.meta["run"]["precision"];
      check(p.is_string() && enum_parse<Precision>(p.get<std::string>()),
            "field 'meta.run.precision' must be \"fp32\" or \"bf16\", got {}", p.dump());
    }
    // attrs.precision of every GEMM node: fp32 or bf16 (docs/graph-format.md); checked here
    // since the accelerator model does not otherwise read it.
    for (const auto& n : g.nodes())
      if (n.category == Category::gemm) (void)gemm_bf16(n);
    return g;
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
}

// A CLI11 check that a sweep value (--kernel, --cores) is a whole number in lo..hi, giving the
// valid values (CLI11 puts the flag's name in front).
CLI::Validator count_in(int64_t lo, int64_t hi, const std::string& example) {
  return CLI::Validator(
      [=](std::string& v) -> std::string {
        int64_t x = 0;
        size_t used = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == v.size() && !v.empty() && x >= lo && x <= hi) return "";
        return fmt::format("expected whole numbers in {}..{} (e.g. {}), got '{}'", lo, hi, example, v);
      },
      fmt::format("INT in {}..{}", lo, hi));
}

Graph make_graph(const EstimateOptions& o) {
  check(o.graph.empty() != o.config.empty(), "give exactly one of --graph FILE or --config CONFIG");
  check(!(o.train && !o.graph.empty()), "--train builds the training graph from --config; a --graph file "
                                        "already says which graph it is");
  check(!(o.precision_given && !o.graph.empty()), "--precision builds the graph from --config; a --graph file "
                                                  "already says which precision its GEMMs run in");
  Graph g;
  if (!o.graph.empty()) {
    g = load_graph_file(o.graph);
  } else {
    ModelShapeOptions m;
    m.config = o.config;
    m.batch = o.batch;
    m.seq = o.seq;
    m.mode = o.train ? RunMode::train : RunMode::infer;
    m.precision = o.precision;
    m.heads = enum_from_string<Heads>(o.heads, "--heads");
    m.nsp = o.nsp;
    g = build_graph(m);
  }
  if (!o.nodes.empty()) {
    std::vector<bool> dead(g.nodes().size());
    bool any = false;
    for (const auto& n : g.nodes()) {
      dead[n.id] = n.name.rfind(o.nodes, 0) != 0;
      any |= !dead[n.id];
    }
    check(any, "--nodes '{}': no node name starts with it", o.nodes);
    g.compact(dead);
  }
  return g;
}

// --arrangement: one name of the arrangement table (hwmodel/arrangement.h), "both" for the
// paper's two (rwma, bwma) or "all" for every arrangement of the table.
std::vector<hw::Arrangement> arrangements(const std::string& a) {
  if (a == "both") return {hw::kPaperArrangements.begin(), hw::kPaperArrangements.end()};
  if (a != "all") return {hw::arrangement_from_string(a, "--arrangement")};
  std::vector<hw::Arrangement> all;
  for (const auto& d : hw::arrangements()) all.push_back(d.id);
  return all;
}

// The summary's columns: the paper's two arrangements always ('-' where one was not
// estimated), then every other arrangement that was, in table order.
std::vector<hw::Arrangement> summary_columns(const std::vector<hw::Arrangement>& estimated) {
  std::vector<hw::Arrangement> cols;
  auto in = [](const auto& v, hw::Arrangement a) { return std::find(v.begin(), v.end(), a) != v.end(); };
  for (const auto& d : hw::arrangements())
    if (in(hw::kPaperArrangements, d.id) || in(estimated, d.id)) cols.push_back(d.id);
  return cols;
}

// The summary table: time and DRAM bytes under every column's arrangement, then the speedup and
// DRAM traffic reduction of each column after the first (the RWMA baseline) over it.
// in_order_core systems: the busiest cores' cycles by component and their events, summed over
// the nodes of one region (empty: every node). The DRAM floor is counted as the cycles by which
// it exceeds a node's core time.
struct ComponentSums {
  double instr = 0, array = 0, l1 = 0, llc = 0, tlb = 0, floor = 0, time = 0;
  int64_t l1_misses = 0, llc_misses = 0, tlb_misses = 0, bytes = 0;
};
ComponentSums component_sums(const hw::GraphEstimate& e, const std::string& region) {
  ComponentSums x;
  for (const auto& n : e.nodes) {
    if (!region.empty() && n.region != region) continue;
    x.instr += n.core.issue_cycles, x.array += n.core.array_cycles, x.l1 += n.core.l1_cycles, x.llc += n.core.llc_cycles;
    x.tlb += n.core.tlb_cycles, x.floor += n.cycles - n.core.total(), x.time += n.cycles;
    x.l1_misses += n.core.l1_misses, x.llc_misses += n.core.llc_misses, x.tlb_misses += n.core.tlb_misses;
    x.bytes += n.traffic.dram_bytes();
  }
  return x;
}

// The BWMA-over-RWMA speedup split into what each component saves: speedup - 1 = the sum over
// components of (RWMA - BWMA cycles) / BWMA time.
std::array<double, 6> speedup_split(const ComponentSums& r, const ComponentSums& b) {
  return {(r.instr - b.instr) / b.time, (r.array - b.array) / b.time, (r.l1 - b.l1) / b.time,
          (r.llc - b.llc) / b.time,     (r.tlb - b.tlb) / b.time,     (r.floor - b.floor) / b.time};
}

// Per region and arrangement, the sums, and each region's speedup split.
std::string region_breakdown(const hw::GraphEstimate& r, const hw::GraphEstimate& b) {
  std::string out =
      "  region     arr   instr Mcyc  array Mcyc  L1 misses  L1 Mcyc  LLC misses  LLC Mcyc  TLB misses  TLB Mcyc  "
      "DRAM floor+ Mcyc  DRAM MB   time Mcyc\n";
  std::string split;
  for (const char* region : {"attention", "ffn", "other"}) {
    const ComponentSums x = component_sums(r, region), y = component_sums(b, region);
    if (x.time == 0 && y.time == 0) continue;
    for (const auto& [name, v] : {std::pair{"rwma", x}, std::pair{"bwma", y}})
      out += fmt::format(
          "  {:<10} {:<4} {:>11.2f} {:>11.2f} {:>10} {:>8.2f} {:>11} {:>9.2f} {:>11} {:>9.2f} {:>17.2f} {:>8.2f} {:>11.2f}\n",
          region, name, v.instr / 1e6, v.array / 1e6, v.l1_misses, v.l1 / 1e6, v.llc_misses, v.llc / 1e6, v.tlb_misses,
          v.tlb / 1e6, v.floor / 1e6, v.bytes / 1e6, v.time / 1e6);
    if (y.time > 0) {
      const auto d = speedup_split(x, y);
      split += fmt::format("  {:<10} {:.2f}x = 1 + instructions {:+.3f} + array {:+.3f} + L1 {:+.3f} + LLC {:+.3f} + TLB "
                           "{:+.3f} + DRAM floor {:+.3f}\n",
                           region, x.time / y.time, d[0], d[1], d[2], d[3], d[4], d[5]);
    }
  }
  return out + "  speedup BWMA over RWMA, split by what each component saves:\n" + split;
}

// The whole graph's split as --paper-table cells: "+instructions | +array | +L1 | +LLC | +TLB | +DRAM floor |".
std::string layer_split_cells(const hw::GraphEstimate& r, const hw::GraphEstimate& b) {
  const auto d = speedup_split(component_sums(r, ""), component_sums(b, ""));
  return fmt::format(" {:+.3f} | {:+.3f} | {:+.3f} | {:+.3f} | {:+.3f} | {:+.3f} |", d[0], d[1], d[2], d[3], d[4], d[5]);
}

std::string summary_header(const std::vector<hw::Arrangement>& all) {
  std::string h = fmt::format("{:>6} {:>5}", "kernel", "cores");
  for (const auto a : all) h += fmt::format(" {:>12}", fmt::format("{} ms", to_string(a)));
  for (const auto a : all) h += fmt::format(" {:>14}", fmt::format("{} DRAM B", to_string(a)));
  for (size_t i = 1; i < all.size(); ++i)
    h += all.size() == 2 ? fmt::format(" {:>8} {:>9}", "speedup", "traffic-")
                         : fmt::format(" {:>8} {:>9}", fmt::format("{} x", to_string(all[i])), fmt::format("{} -", to_string(all[i])));
  return h + "\n";
}
std::string summary_row(const std::vector<hw::Arrangement>& all, int64_t S, int64_t P,
                        std::map<hw::Arrangement, hw::GraphEstimate>& est) {
  std::string r = fmt::format("{:>6} {:>5}", S, P);
  for (const auto a : all)
    r += fmt::format(" {:>12}", est.count(a) ? fmt::format("{:.3f}", est[a].seconds() * 1e3) : "-");
  for (const auto a : all) r += fmt::format(" {:>14}", est.count(a) ? fmt::format("{}", est[a].dram_bytes()) : "-");
  const hw::Arrangement base = all[0];
  for (size_t i = 1; i < all.size(); ++i) {
    std::string speed = "-", red = "-";
    if (est.count(base) && est.count(all[i])) {
      const auto &b = est[base], &x = est[all[i]];
      speed = fmt::format("{:.2f}x", b.seconds() / x.seconds());
      red = fmt::format("{:.1f}%", 100.0 * (1 - double(x.dram_bytes()) / b.dram_bytes()));
    }
    r += fmt::format(" {:>8} {:>9}", speed, red);
  }
  return r + "\n";
}

// Measured seconds per node name (--compare-profile), for the CSV and JSON outputs.
using MeasuredSeconds = std::map<std::string, double>;

std::string csv_rows(const hw::GraphEstimate& e, const MeasuredSeconds* measured) {
  std::string s;
  for (const auto& n : e.nodes) {
    s += fmt::format("{},{},{},{},{},{},{},{:.6g},{:.0f},{:.0f},{:.0f},{:.0f},{},{},{},{},{},{:.0f},{:.0f},{},{:.0f},{},{:.0f},{},{:.0f}",
                     e.system.array.kernel, e.system.cores, to_string(e.arrangement), n.name, n.op, n.model, n.region,
                     n.seconds, n.cycles, n.compute_cycles, n.memory_cycles, n.dram_cycles, n.traffic.dram_bytes(),
                     n.traffic.bursts(), n.traffic.row_hits(), n.traffic.row_misses(), n.tiles, n.core.instructions,
                     n.core.array_cycles, n.core.l1_misses, n.core.l1_cycles, n.core.llc_misses, n.core.llc_cycles,
                     n.core.tlb_misses, n.core.tlb_cycles);
    if (measured) s += fmt::format(",{:.6g}", measured->at(n.name));
    s += "\n";
  }
  return s;
}

nlohmann::json to_json(const hw::GraphEstimate& e, const MeasuredSeconds* measured) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : e.nodes) {
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [k, o] : n.traffic.operands)
      ops[k] = {{"read_lines", o.read_lines}, {"write_lines", o.write_lines}, {"row_misses", o.row_misses},
                {"refetch", o.refetch}, {"why", o.why}};
    nodes.push_back({{"name", n.name}, {"op", n.op}, {"model", n.model}, {"region", n.region},
                     {"phase", n.phase}, {"seconds", n.seconds}, {"cycles", n.cycles},
                     {"compute_cycles", n.compute_cycles}, {"memory_cycles", n.memory_cycles},
                     {"dram_cycles", n.dram_cycles}, {"dram_bytes", n.traffic.dram_bytes()},
                     {"bursts", n.traffic.bursts()}, {"row_hits", n.traffic.row_hits()},
                     {"row_misses", n.traffic.row_misses()}, {"tiles", n.tiles}, {"operands", ops},
                     {"terms", n.terms}});
    if (e.system.in_order_cores())
      nodes.back()["core"] = {{"instructions", n.core.instructions}, {"issue_cycles", n.core.issue_cycles},
                              {"array_cycles", n.core.array_cycles}, {"l1_misses", n.core.l1_misses},
                              {"l1_cycles", n.core.l1_cycles},       {"llc_misses", n.core.llc_misses},
                              {"llc_cycles", n.core.llc_cycles},     {"tlb_misses", n.core.tlb_misses},
                              {"tlb_cycles", n.core.tlb_cycles},     {"issues", n.issues}};
    if (measured) nodes.back()["measured_seconds"] = measured->at(n.name);
  }
  return {{"kernel", e.system.array.kernel}, {"cores", e.system.cores},
          {"arrangement", to_string(e.arrangement)}, {"seconds", e.seconds()},
          {"dram_bytes", e.dram_bytes()}, {"nodes", nodes}};
}

std::string ratio(double predicted, double measured) {
  return measured > 0 ? fmt::format("{:.2f}", predicted / measured) : "-";
}

void print_comparison(const hw::ProfileComparison& c, const std::string& path, int top) {
  fmt::print("\ncompared with the measured profile {}{}:\n", path,
             c.accum > 1 ? fmt::format(" ({} micro-batches per step: forward and backward predictions x{}, "
                                       "the weights' packing and casts once)",
                                       c.accum, c.accum)
                         : "");
  fmt::print("  {:<26} {:>11} {:>12} {:>10} {:>6}\n", "category", "measured ms", "predicted ms", "pred/meas", "nodes");
  for (const auto& r : c.categories) {
    if (r.nodes == 0 && r.measured == 0) continue;
    const bool unattributed = r.key == "unattributed";
    fmt::print("  {:<26} {:>11.2f} {:>12} {:>10} {:>6}\n", r.label, r.measured * 1e3,
               unattributed ? "-" : fmt::format("{:.2f}", r.predicted * 1e3),
               unattributed ? "-" : ratio(r.predicted, r.measured), r.nodes);
  }
  fmt::print("  {:<26} {:>11.2f} {:>12.2f} {:>10} {:>6}\n", "whole step", c.measured_step * 1e3,
             c.predicted_step * 1e3, ratio(c.predicted_step, c.measured_step), c.nodes.size());
  const auto worst = c.worst(static_cast<size_t>(top));
  fmt::print("\n  worst-predicted {} nodes (largest |predicted - measured|):\n", worst.size());
  fmt::print("  {:<52} {:<24} {:>11} {:>12} {:>10}\n", "node", "op", "measured ms", "predicted ms", "pred/meas");
  for (size_t i : worst) {
    const auto& n = c.nodes[i];
    fmt::print("  {:<52} {:<24} {:>11.3f} {:>12.3f} {:>10}\n", n.name, to_string(n.kind), n.measured * 1e3,
               n.predicted * 1e3, ratio(n.predicted, n.measured));
  }
}

// --cluster: one data-parallel training step on each node count of the cluster file, and the
// whole run when the file gives its steps (hwmodel/cluster.h).
void run_cluster(const EstimateOptions& o) {
  check(o.system.empty(), "--cluster FILE describes the nodes itself: give --cluster or --system, not both");
  check(o.train, "--cluster estimates training: add --train");
  const hw::ClusterDesc c = hw::load_cluster(o.cluster);
  const Graph g = make_graph(o);
  const std::string node = c.node_profile.empty() ? fmt::format("{} ({} threads)", c.node.name, c.node.cores)
                                                  : fmt::format("measured in {}", c.node_profile);
  fmt::print("cluster {}: per node {}, link {:g} Gbit/s, latency {:g} us, {} allreduce, {}, {} on the wire\n",
             c.name, node, c.link_gbps, c.latency_us, hw::to_string(c.algorithm),
             c.overlap ? fmt::format("{:g} MiB buckets overlapped with backward", double(c.bucket_bytes) / (1 << 20))
                       : std::string("flat after backward"),
             to_string(c.wire));
  fmt::print("per node: micro-batch {} x {} per step, seq {}\n\n", o.batch, o.accum, o.seq);
  std::string head = "| nodes | global batch | step s | forward s | backward s | optimizer s | allreduce s | exposed s | "
                     "efficiency | seq/s |";
  std::string rule = "|---|---|---|---|---|---|---|---|---|---|";
  if (c.steps > 0) head += " run hours | node-hours |", rule += "---|---|";
  if (c.steps > 0 && c.node_hour_cost > 0) head += " cost |", rule += "---|";
  fmt::print("{}\n{}\n", head, rule);
  nlohmann::json out = nlohmann::json::array();
  for (int64_t n : c.nodes) {
    const hw::ClusterEstimate e = hw::estimate_cluster(g, c, n, o.accum);
    const int64_t global = n * o.batch * o.accum;
    std::string row = fmt::format("| {} | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.1f}% | {:.1f} |", n,
                                  global, e.step_s, e.forward_s, e.backward_s, e.optimizer_s, e.comm_s,
                                  e.exposed_comm_s, 100 * e.efficiency(), double(global) / e.step_s);
    const double hours = e.step_s * double(c.steps) / 3600;
    if (c.steps > 0) row += fmt::format(" {:.1f} | {:.1f} |", hours, hours * double(n));
    if (c.steps > 0 && c.node_hour_cost > 0) row += fmt::format(" {:.2f} |", hours * double(n) * c.node_hour_cost);
    fmt::print("{}\n", row);
    out.push_back({{"nodes", n}, {"global_batch", global}, {"step_s", e.step_s}, {"forward_s", e.forward_s},
                   {"backward_s", e.backward_s}, {"optimizer_s", e.optimizer_s}, {"allreduce_s", e.comm_s},
                   {"exposed_allreduce_s", e.exposed_comm_s}, {"single_node_step_s", e.single_node_step_s},
                   {"efficiency", e.efficiency()}, {"buckets", e.buckets.size()}, {"rows_allgather_s", e.rows_s}});
  }
  if (!o.json.empty()) write_json_output(o.json, out);
  fmt::print("\nefficiency: the step of one node without communication over the step on N nodes (same work per node)\n");
  if (c.overlap)
    fmt::print("allreduce s includes the allgather of the word-embedding rows of each node's batch after backward\n");
}

// The set-resolved model grows lists of missing lines to megabytes and frees them, node after
// node. glibc serves blocks past its mmap threshold (128 KiB, raised only to the largest
// block freed so far) with fresh mappings and trims the heap top at 128 KiB, so those pages
// were faulted in again and again: 550,000 page faults and 1.1-1.3 s of system time in the
// modulo-indexed benchmark (scripts/hwmodel_bench.sh modulo). Blocks up to 32 MiB (glibc's
// largest threshold) now stay in the heap, and the heap keeps up to 256 MiB free at its
// top: 27,000 page faults, under 0.1 s of system time. Process-wide, so set by the command.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

// --bench: the model over `o.bench` distinct system configurations (kernel x cores x LLC size x
// DRAM bandwidth, each under one arrangement), timed end to end including the node
// classification; every configuration estimates every node from scratch.
void run_bench(const EstimateOptions& o, const Graph& g, const hw::SystemDesc& base) {
  std::vector<std::pair<hw::SystemDesc, hw::Arrangement>> configs;
  for (int64_t i = 0; static_cast<int>(configs.size()) < o.bench; ++i) {
    hw::SystemDesc s = base;
    s.array.kernel = int64_t{4} << (i % 4);
    s.cores = int64_t{1} << ((i / 4) % 3);
    s.llc.size_bytes = base.llc.size_bytes << ((i / 12) % 5);
    s.dram.peak_gbps = base.dram.peak_gbps * (1 + (i / 60) % 4);
    hw::validate(s, o.system);
    // The paper's two arrangements at every kernel size.
    const auto& two = hw::kPaperArrangements;
    configs.emplace_back(s, two[((i / 4) + i + 1) % two.size()]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const hw::NodeClasses classes = hw::classify_nodes(g);
  hw::EstimateOptions eo;
  eo.classes = &classes;
  double checksum = 0;
  size_t estimates = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto& [s, a] = configs[i];
    const std::clock_t c0 = std::clock();
    const auto e = hw::estimate_graph(g, s, a, eo);
    checksum += e.seconds();
    estimates += e.nodes.size();
    // --bench-detail: the CPU time of each configuration, on stderr so that the last line of
    // stdout (which scripts/hwmodel_bench.sh reads) keeps its format.
    if (o.bench_detail)
      fmt::print(stderr, "config {}: S={} cores={} llc={} KB dram={} GB/s {}: {:.3f} s CPU\n", i, s.array.kernel,
                 s.cores, s.llc.size_bytes / 1024, s.dram.peak_gbps, hw::to_string(a),
                 double(std::clock() - c0) / CLOCKS_PER_SEC);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("benchmark: {} nodes ({} distinct shapes) x {} system configurations in {:.3f} s ({:.2f} us per "
             "node estimate, {} node results; sum of estimated times {:.4f} s)\n",
             g.nodes().size(), classes.first.size(), configs.size(), secs,
             1e6 * secs / (g.nodes().size() * configs.size()), estimates, checksum);
}

void run(const EstimateOptions& o) {
  if (!o.cluster.empty()) return run_cluster(o);
  keep_freed_memory();
  check(!o.system.empty(), "--system FILE is required (see configs/systems/)");
  hw::SystemDesc base = hw::load_system(o.system);
  if (o.walk_given) {
    check(base.in_order_cores(),
          "--walk {}: {} does not use the in-order core model (\"compute_model\": \"in_order_core\"), the only one that "
          "walks schedules",
          to_string(o.walk), o.system);
    base.core_walk = o.walk;
  }
  std::optional<nlohmann::json> profile;
  if (!o.compare_profile.empty()) {
    hw::check_comparable(base, o.system);
    check(o.bench == 0, "--compare-profile and --bench do not go together");
    profile = hw::load_profile(o.compare_profile);
  }
  const Graph g = make_graph(o);
  if (!o.explain.empty())
    check(g.find_node(o.explain).has_value(), "--explain: the graph has no node named '{}'", o.explain);
  std::vector<int64_t> kernels = o.kernels.empty() ? std::vector<int64_t>{base.array.kernel} : o.kernels;
  std::vector<int64_t> cores = o.cores.empty() ? std::vector<int64_t>{base.cores} : o.cores;
  if (base.kind == hw::SystemKind::accelerator && o.bench == 0) {
    for (int64_t S : kernels)
      hw::check_kernel_fits(g, S, o.kernels.empty() ? fmt::format("{}: field 'array.kernel'", o.system) : "--kernel");
    for (int64_t P : o.cores)
      check(P <= hw::kMaxAcceleratorCores, "--cores {}: an accelerator description takes 1..{} cores", P,
            hw::kMaxAcceleratorCores);
  }
  const auto arrs = base.kind == hw::SystemKind::cpu ? std::vector<hw::Arrangement>{hw::kBaselineArrangement} : arrangements(o.arrangement);
  for (const hw::Arrangement a : arrs) hw::check_arrangement_supported(base, a);  // before any output

  if (o.bench > 0) return run_bench(o, g, base);

  const bool in_order_core = base.in_order_cores();
  const hw::NodeClasses classes = hw::classify_nodes(g);
  std::string csv = "kernel,cores,arrangement,node,op,model,region,seconds,cycles,compute_cycles,memory_cycles,"
                    "dram_cycles,dram_bytes,bursts,row_hits,row_misses,tiles,instructions,array_cycles,l1_misses,l1_cycles,"
                    "llc_misses,llc_cycles,tlb_misses,tlb_cycles";
  csv += profile ? ",measured_seconds\n" : "\n";
  std::optional<hw::ProfileComparison> comparison;
  MeasuredSeconds measured;
  nlohmann::json all = nlohmann::json::array();
  std::string table;
  fmt::print("system {} ({}), {} nodes\n", base.name, o.system, g.nodes().size());
  const auto columns = summary_columns(arrs);
  fmt::print("{}", summary_header(columns));
  hw::StreamWalkMemo stream_walks;  // the stream-only nodes, walked once for the sweep
  for (int64_t S : kernels)
    for (int64_t P : cores) {
      hw::SystemDesc s = base;
      s.array.kernel = S;
      s.cores = P;
      hw::validate(s, o.system);
      std::map<hw::Arrangement, hw::GraphEstimate> est;
      for (auto a : arrs) {
        hw::EstimateOptions eo;
        eo.classes = &classes;
        eo.stream_walks = &stream_walks;
        eo.terms = !o.json.empty();  // the JSON carries every node's terms
        eo.explain = o.explain;
        est[a] = hw::estimate_graph(g, s, a, eo);
        if (profile && !comparison) {
          comparison = hw::compare_with_profile(g, est[a], *profile, o.compare_profile);
          for (const auto& n : comparison->nodes) measured[n.name] = n.measured;
        }
        const MeasuredSeconds* m = profile ? &measured : nullptr;
        csv += csv_rows(est[a], m);
        all.push_back(to_json(est[a], m));
        if (!o.explain.empty()) {
          fmt::print("--- {} under {} (S={}, cores={}):\n", o.explain, to_string(a), S, P);
          for (const auto& n : est[a].nodes)
            if (n.name == o.explain || n.name == o.explain + ".convert") {
              fmt::print("  [{}] model {}\n", n.name, n.model);
              for (const auto& t : n.terms) fmt::print("    - {}\n", t);
            }
        }
      }
      fmt::print("{}", summary_row(columns, S, P, est));
      if (!o.explain.empty() && s.in_order_cores() &&
          est.count(hw::Arrangement::rwma) && est.count(hw::Arrangement::bwma))
        fmt::print("{}", region_breakdown(est[hw::Arrangement::rwma], est[hw::Arrangement::bwma]));
      // The paper's comparison (docs/hwmodel-paper-table.md): BWMA over RWMA per region.
      if (est.count(hw::Arrangement::rwma) && est.count(hw::Arrangement::bwma)) {
        const auto& r = est[hw::Arrangement::rwma];
        const auto& b = est[hw::Arrangement::bwma];
        auto sp = [&](const std::string& reg) { return r.seconds_in(reg) / std::max(1e-30, b.seconds_in(reg)); };
        auto rd = [&](const std::string& reg) {
          return 100.0 * (1 - double(b.dram_bytes_in(reg)) / std::max<int64_t>(1, r.dram_bytes_in(reg)));
        };
        table += fmt::format("| {} | {} | {:.2f}x | {:.2f}x | {:.2f}x | {:.1f}% | {:.1f}% | {:.1f}% |", S, P,
                             sp("attention"), sp("ffn"), r.seconds() / b.seconds(), rd("attention"), rd("ffn"),
                             100.0 * (1 - double(b.dram_bytes()) / r.dram_bytes()));
        table += (in_order_core ? layer_split_cells(r, b) : std::string()) + "\n";
      }
    }
  if (comparison) print_comparison(*comparison, o.compare_profile, o.top);
  if (!o.csv.empty()) write_text_atomically(o.csv, csv);
  if (!o.json.empty()) write_json_output(o.json, all);
  if (!o.paper_table.empty()) {
    const std::string head =
        in_order_core
            ? "| S | cores | speedup attention | speedup FFN | speedup graph | DRAM traffic reduction attention | "
              "reduction FFN | reduction graph | graph speedup - 1: instructions | array | L1 | LLC | TLB | DRAM floor "
              "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
            : "| S | cores | speedup attention | speedup FFN | speedup layer | DRAM traffic reduction attention | "
              "reduction FFN | reduction layer |\n|---|---|---|---|---|---|---|---|\n";
    write_text_atomically(o.paper_table, head + table);
  }
}

}  // namespace

void add_estimate_command(CLI::App& root) {
  auto* cmd = root.add_subcommand("estimate", "Estimate time and off-chip traffic of a graph on an accelerator, RWMA vs BWMA");
  auto o = std::make_shared<EstimateOptions>();
  cmd->add_option("--graph", o->graph, "Graph JSON written by `bertlab graph`");
  cmd->add_option("--config,--model", o->config, "config.json or model directory (instead of --graph)");
  cmd->add_option("--batch", o->batch, "Batch size")->check(positive_number());
  cmd->add_option("--seq", o->seq, "Sequence length")->check(positive_number());
  cmd->add_flag("--train", o->train, "Estimate the training graph");
  cmd->add_flag("--no-nsp{false}", o->nsp, "Training graph of the masked LM alone (as train --no-nsp)");
  add_precision_option(*cmd, o->precision);
  cmd->add_option("--heads", o->heads,
                  "Inference graph heads: pretraining (default) or none (as `bertlab profile --mode infer` builds it)")
      ->check(CLI::IsMember({"pretraining", "none"}));
  cmd->add_option("--system", o->system, "System description JSON (configs/systems/) or machine.json");
  cmd->add_option("--cluster", o->cluster,
                  "Cluster description JSON (docs/hwmodel-cluster.md): data-parallel training on N nodes, instead of --system");
  cmd->add_option("--accum", o->accum, "Micro-batches per optimizer step (--cluster)")->check(positive_number());
  std::string names;
  for (const auto& d : hw::arrangements()) names += std::string(to_string(d.id)) + ", ";
  cmd->add_option("--arrangement", o->arrangement,
                  fmt::format("An arrangement ({}), both (the paper's two, rwma and bwma: the default) or all",
                              names.substr(0, names.size() - 2)))
      ->check([names](const std::string& v) {
        if (v == "both" || v == "all" || enum_parse<hw::Arrangement>(v).has_value()) return std::string();
        return fmt::format("'{}' is not an arrangement (expected one of: {}both, all)", v, names);
      });
  cmd->add_option("--kernel", o->kernels, "Kernel sizes S to sweep, e.g. 4,8,16,32")
      ->delimiter(',')
      ->check(count_in(1, 4096, "4,8,16,32"));
  cmd->add_option("--cores", o->cores, "Core counts to sweep, e.g. 1,2,4")
      ->delimiter(',')
      ->check(count_in(1, hw::kMaxCpuCores, "1,2,4"));
  add_enum_option(*cmd, "--walk", o->walk,
                  "in_order_core systems: exact (every access) or sampled (the split walk, docs/hwmodel.md); default: the "
                  "system's core.walk");
  cmd->add_option("--csv", o->csv, "Write per-node results as CSV");
  cmd->add_option("--json", o->json, "Write per-node results as JSON");
  cmd->add_option("--explain", o->explain, "Print the terms of the estimate of this node");
  cmd->add_option("--nodes", o->nodes, "Only nodes whose name starts with this prefix (e.g. encoder.0.)");
  cmd->add_option("--paper-table", o->paper_table, "Write the BWMA-over-RWMA table (markdown) to this file");
  cmd->add_option("--bench", o->bench, "Time the model over this many system configurations");
  cmd->add_flag("--bench-detail", o->bench_detail, "With --bench: print each configuration's CPU time on stderr");
  cmd->add_option("--compare-profile", o->compare_profile,
                  "Compare a cpu estimate with `bertlab profile --json` of the same graph (per category, step, nodes)");
  cmd->add_option("--top", o->top, "Worst-predicted nodes listed with --compare-profile (default 10)")
      ->check(CLI::Range(0, 100000));
  cmd->callback([o, cmd] {
    o->precision_given = cmd->count("--precision") > 0;
    o->walk_given = cmd->count("--walk") > 0;
    run(*o);
  });
}

}  // namespace bertlab::app

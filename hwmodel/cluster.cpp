#include "hwmodel/cluster.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "base/error.h"
#include "base/json_file.h"
#include "hwmodel/estimate.h"
#include "hwmodel/json_fields.h"
#include "runtime/grad_sync.h"
#include "runtime/params.h"

namespace bertlab::hw {

namespace {

using nlohmann::json;

SystemDesc node_from(const json& j, const std::string& origin) {
  check(j.contains("node"), "{}: missing field 'node' (a machine.json path, or the system inline)", origin);
  SystemDesc s;
  if (j.at("node").is_string()) {
    std::filesystem::path p = j.at("node").get<std::string>();
    if (p.is_relative()) p = std::filesystem::path(origin).parent_path() / p;
    try {
      s = load_system(p.string());
    } catch (const Error& e) {
      fail("{}: field 'node': {}", origin, e.what());
    }
  } else {
    s = system_from_json(j.at("node"), origin + " (field 'node')");
  }
  check(s.kind == SystemKind::cpu, "{}: field 'node' must describe a cpu (machine.json from `bertlab calibrate`), got {}",
        origin, to_string(s.kind));
  return s;
}

}  // namespace

ClusterDesc load_cluster(const std::string& path) {
  const json j = read_json_file(path, "cluster description");
  check(j.is_object(), "{}: a cluster description must be a JSON object", path);
  check(field_or<std::string>(j, "format", "", "", path) == "bertlab-cluster",
        "{}: field 'format' must be \"bertlab-cluster\"", path);
  ClusterDesc c;
  c.name = field_or<std::string>(j, "name", path, "", path);
  const json nodes = field<json>(j, "nodes", "", path);
  check(nodes.is_array() ? !nodes.empty() : nodes.is_number_integer(),
        "{}: field 'nodes' must be a whole number or a list of them, got {}", path, nodes.dump());
  for (const json& n : nodes.is_array() ? nodes : json::array({nodes})) {
    check(n.is_number_integer() && n.get<int64_t>() >= 1 && n.get<int64_t>() <= (int64_t{1} << 20),
          "{}: field 'nodes' must hold node counts from 1 to 1048576, got {}", path, n.dump());
    c.nodes.push_back(n.get<int64_t>());
  }
  if (j.contains("node_profile")) {
    std::filesystem::path p = field<std::string>(j, "node_profile", "", path);
    if (p.is_relative()) p = std::filesystem::path(path).parent_path() / p;
    c.node_profile = p.string();
    const json prof = read_json_file(p, "profile (field 'node_profile' of " + path + ")");
    const json nodes_measured = field<json>(prof, "nodes", "", c.node_profile);
    check(nodes_measured.is_array() && !nodes_measured.empty(), "{}: field 'nodes' must be a non-empty list", c.node_profile);
    for (const json& n : nodes_measured)
      c.node_seconds[field<std::string>(n, "name", "nodes[]", c.node_profile)] = field<double>(n, "seconds", "nodes[]", c.node_profile);
    if (j.contains("node")) c.node = node_from(j, path);
  } else {
    c.node = node_from(j, path);
  }
  const json net = field<json>(j, "network", "", path);
  c.link_gbps = field<double>(net, "bandwidth_gbps", "network", path);
  check(c.link_gbps > 0 && std::isfinite(c.link_gbps), "{}: field 'network.bandwidth_gbps' must be above 0, got {}", path,
        c.link_gbps);
  c.latency_us = field_or<double>(net, "latency_us", 0, "network", path);
  check(c.latency_us >= 0 && std::isfinite(c.latency_us), "{}: field 'network.latency_us' must be 0 or more, got {}",
        path, c.latency_us);
  c.algorithm = enum_field_or(net, "allreduce", AllreduceAlgorithm::ring, "network", path);
  const json ar = field_or<json>(j, "allreduce", json::object(), "", path);
  const double mb = field_or<double>(ar, "bucket_mb", 25, "allreduce", path);
  check(mb > 0 && std::isfinite(mb), "{}: field 'allreduce.bucket_mb' must be above 0, got {}", path, mb);
  c.bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(mb * (1 << 20)));
  c.overlap = field_or<bool>(ar, "overlap", true, "allreduce", path);
  c.wire = precision_from_string(field_or<std::string>(ar, "dtype", "fp32", "allreduce", path), path + ": field 'allreduce.dtype'");
  const json run = field_or<json>(j, "run", json::object(), "", path);
  c.steps = field_or<int64_t>(run, "steps", 0, "run", path);
  check(c.steps >= 0, "{}: field 'run.steps' must be 0 or more, got {}", path, c.steps);
  c.node_hour_cost = field_or<double>(run, "node_hour_cost", 0, "run", path);
  check(c.node_hour_cost >= 0 && std::isfinite(c.node_hour_cost), "{}: field 'run.node_hour_cost' must be 0 or more", path);
  return c;
}

namespace {
double alpha_of(const ClusterDesc& c) { return c.latency_us * 1e-6; }           // one message's latency
double beta_of(const ClusterDesc& c) { return 1.0 / (c.link_gbps * 1e9 / 8); }  // seconds per byte on one link
}  // namespace

double allgather_seconds(const ClusterDesc& c, int64_t nodes, double bytes) {
  // Ring allgather: N - 1 steps, each passing one node's contribution to the next node while
  // receiving another (full duplex): (N - 1) (alpha + bytes x beta).
  return nodes <= 1 ? 0 : (static_cast<double>(nodes) - 1) * (alpha_of(c) + bytes * beta_of(c));
}

double allreduce_seconds(const ClusterDesc& c, int64_t nodes, double bytes) {
  if (nodes <= 1) return 0;
  const double n = static_cast<double>(nodes);
  const double alpha = alpha_of(c), beta = beta_of(c);
  switch (c.algorithm) {
    case AllreduceAlgorithm::ring:
      // Ring allreduce (reduce-scatter then allgather, Patarasuk and Yuan 2009): 2 (N-1) steps,
      // each sending one N-th of the buffer to the next node while receiving from the previous
      // (full duplex): 2 (N-1) (alpha + bytes / N x beta).
      return 2 * (n - 1) * (alpha + bytes / n * beta);
    case AllreduceAlgorithm::tree:
      // Binary-tree reduce then broadcast of the whole buffer, unpipelined (Thakur, Rabenseifner
      // and Gropp 2005): 2 ceil(log2 N) (alpha + bytes x beta).
      return 2 * std::ceil(std::log2(n)) * (alpha + bytes * beta);
  }
  return 0;
}

ClusterEstimate estimate_cluster(const Graph& g, const ClusterDesc& c, int64_t nodes, int64_t accum) {
  check(nodes >= 1, "a cluster estimate needs at least one node, got {}", nodes);
  check(accum >= 1, "a cluster estimate needs at least one micro-batch per step, got {}", accum);
  std::unordered_map<std::string, double> seconds, per_step;  // per_step: estimated nodes only
  if (!c.node_seconds.empty()) {
    // The node measured (node_profile): every graph node must be in the profile.
    for (const auto& n : g.nodes()) {
      if (n.phase == Phase::communication) continue;
      const auto it = c.node_seconds.find(n.name);
      check(it != c.node_seconds.end(), "{}: the profile has no node '{}' (was it made for the same graph: "
            "config, batch, seq, --no-nsp, precision?)", c.node_profile, n.name);
      seconds[n.name] = it->second;
    }
  } else {
    const GraphEstimate est = estimate_graph(g, c.node, kBaselineArrangement);  // the cpu kind ignores the arrangement
    for (const auto& n : est.nodes) seconds[n.name] += n.seconds, per_step[n.name] += n.per_step_seconds;
  }
  // The node's timeline of one micro-batch (forward then backward, graph order), the optimizer
  // once per step; the graph's own allreduce node (local memory traffic) is replaced below.
  // With accumulation (estimated nodes), the weights are packed or cast on the first
  // micro-batch only (per_step_seconds): the later ones, the last included, skip that part.
  ClusterEstimate r;
  r.nodes = nodes, r.accum = accum;
  std::vector<double> end_of(g.nodes().size(), 0.0);  // time at which node i of the last micro-batch ends
  double t = 0, first_only = 0;  // first_only: the weight preparation of forward and backward
  double forward_first = 0, backward_first = 0;
  for (const auto& n : g.nodes()) {
    const auto it = seconds.find(n.name);
    const double s = it == seconds.end() ? 0 : it->second;
    const auto once = per_step.find(n.name);
    const double prep = accum > 1 && once != per_step.end() ? once->second : 0;
    switch (n.phase) {
      case Phase::forward: forward_first += s, r.forward_s += s - prep, t += s - prep, first_only += prep; break;
      case Phase::backward: backward_first += s, r.backward_s += s - prep, t += s - prep, first_only += prep; break;
      case Phase::optimizer: r.optimizer_s += s; break;
      case Phase::communication: break;
    }
    end_of[static_cast<size_t>(n.id)] = t;
  }
  // One micro-batch as it runs after the first (all of them when accum = 1).
  const double micro = r.forward_s + r.backward_s;
  // Earlier micro-batches, no communication: the first with the weights' preparation.
  const double before_last = static_cast<double>(accum - 1) * micro + (accum > 1 ? first_only : 0);
  r.forward_s = forward_first + static_cast<double>(accum - 1) * r.forward_s;
  r.backward_s = backward_first + static_cast<double>(accum - 1) * r.backward_s;
  r.single_node_step_s = before_last + micro + r.optimizer_s;
  // The gradient buckets, as the trainer plans them (same graph, same planner).
  const ParamStore grads = ParamStore::for_graph(g);
  const double wire_scale = c.wire == Precision::bf16 ? 0.5 : 1.0;  // bf16: 2 of the 4 bytes
  double busy_until = 0, last_end = before_last + micro;
  if (nodes > 1) {
    std::vector<GradBucket> plan;
    if (c.overlap)
      plan = plan_grad_buckets(g, grads, c.bucket_bytes, /*defer_rows=*/true);
    else
      plan = {GradBucket{0, grads.arena_size(), -1}};
    for (const GradBucket& b : plan) {
      BucketTiming bt;
      bt.bytes = static_cast<int64_t>(static_cast<double>(b.end - b.begin) * 4 * wire_scale);
      // Ready when its last backward node ends (no overlap: after the whole backward); the link
      // carries one bucket at a time, in the planner's order.
      bt.ready_s = before_last + (c.overlap && b.ready_node >= 0 ? end_of[static_cast<size_t>(b.ready_node)] : micro);
      if (!c.overlap) bt.ready_s = before_last + micro;
      bt.start_s = std::max(bt.ready_s, busy_until);
      bt.end_s = bt.start_s + allreduce_seconds(c, nodes, static_cast<double>(bt.bytes));
      busy_until = bt.end_s;
      r.comm_s += bt.end_s - bt.start_s;
      r.buckets.push_back(bt);
    }
    // Overlapped: the word rows the embedding backward added, exchanged after it (runtime/
    // grad_sync.h). Each node sends its batch's distinct tokens' rows (an id and `width` floats
    // each, after an 8-byte count) to every other: an allgather. The distinct tokens of
    // T = batch x seq drawn uniformly from V: V (1 - (1 - 1/V)^T), an upper bound for text,
    // whose Zipf-distributed tokens repeat more.
    if (c.overlap)
      for (const auto& rs : row_sparse_grads(g, grads)) {
        const Node& n = g.nodes()[static_cast<size_t>(rs.node)];
        const double T = static_cast<double>(g.tensor(n.inputs.at(1)).numel()), V = static_cast<double>(rs.rows);
        const double distinct = V * (1 - std::pow(1 - 1 / V, T));
        const double s = allgather_seconds(c, nodes, 8 + distinct * (4 + 4 * static_cast<double>(rs.width)));
        const double start = std::max(before_last + end_of[static_cast<size_t>(rs.node)], busy_until);
        busy_until = start + s;
        r.rows_s += s, r.comm_s += s;
      }
    last_end = std::max(last_end, busy_until);
  }
  r.exposed_comm_s = last_end - (before_last + micro);
  r.step_s = last_end + r.optimizer_s;
  return r;
}

}  // namespace bertlab::hw

#include "hwmodel/profile_compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "base/json_file.h"

namespace bertlab::hw {

namespace {

using nlohmann::json;

// "a, b, c (and 7 more)": the first few names of a list, for error messages.
std::string first_names(const std::vector<std::string>& names, size_t shown = 5) {
  std::string s;
  for (size_t i = 0; i < std::min(shown, names.size()); ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > shown) s += fmt::format(" (and {} more)", names.size() - shown);
  return s;
}

double number_field(const json& j, const std::string& key, const std::string& path, const std::string& origin) {
  check(j.is_object() && j.contains(key), "{}: missing field '{}'; not a profile written by `bertlab profile --json`",
        origin, path);
  check(j.at(key).is_number() && j.at(key).get<double>() >= 0, "{}: field '{}' must be a non-negative number, got {}",
        origin, path, j.at(key).dump());
  return j.at(key).get<double>();
}

// The profile's run must be the graph's: node names alone do not tell batch, sequence length
// or precision apart.
void check_same_run(const Graph& g, const json& profile, const std::string& origin) {
  const json graph_run = g.meta.is_object() ? g.meta.value("run", json::object()) : json::object();
  const json prof_run = profile.value("run", json::object());
  if (!graph_run.is_object() || !prof_run.is_object()) return;
  for (const char* key : {"mode", "batch", "seq", "precision", "heads"}) {
    if (!graph_run.contains(key) || !prof_run.contains(key)) continue;
    check(graph_run.at(key) == prof_run.at(key),
          "{}: the profile is of another graph: field 'run.{}' is {} but the estimated graph has {} {} (estimate "
          "with the profile's --batch, --seq, --precision, --heads and --train)",
          origin, key, prof_run.at(key).dump(), key, graph_run.at(key).dump());
  }
}

}  // namespace

void check_comparable(const SystemDesc& s, const std::string& origin) {
  check(s.kind == SystemKind::cpu,
        "--compare-profile: system '{}' ({}) is an {} description; measured profiles can only be compared with a "
        "cpu description (configs/systems/this-cpu.json or a machine.json)",
        s.name, origin, to_string(s.kind));
}

std::vector<size_t> ProfileComparison::worst(size_t n) const {
  std::vector<size_t> idx(nodes.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto err = [&](size_t i) { return std::abs(nodes[i].predicted - nodes[i].measured); };
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return err(a) > err(b); });
  idx.resize(std::min(n, idx.size()));
  return idx;
}

json load_profile(const std::string& path) {
  return read_json_file(path, "profile", "; write one with `bertlab profile --json FILE`");
}

ProfileComparison compare_with_profile(const Graph& g, const GraphEstimate& e, const json& profile,
                                       const std::string& origin) {
  check_comparable(e.system, "the estimate's system");
  const std::string format = profile.is_object() && profile.contains("format") && profile.at("format").is_string()
                                 ? profile.at("format").get<std::string>()
                                 : "";
  check(format != "bertlab-profile-sweep",
        "{}: a profile sweep (format \"bertlab-profile-sweep\"); compare one configuration, written by `bertlab "
        "profile --json FILE` without --sweep",
        origin);
  check(format == "bertlab-profile",
        "{}: not a bertlab profile (expected field 'format' to be \"bertlab-profile\", got {})", origin,
        profile.is_object() && profile.contains("format") ? profile.at("format").dump() : "nothing");
  check(profile.value("version", json(nullptr)) == json(1), "{}: profile version {} is not supported (expected 1)",
        origin, profile.value("version", json(nullptr)).dump());
  check_same_run(g, profile, origin);

  ProfileComparison c;
  c.measured_step = number_field(profile, "step_seconds", "step_seconds", origin);
  if (profile.contains("step_stats") && profile.at("step_stats").contains("accum"))
    c.accum = static_cast<int>(number_field(profile.at("step_stats"), "accum", "step_stats.accum", origin));
  check(c.accum >= 1, "{}: field 'step_stats.accum' must be at least 1, got {}", origin, c.accum);

  check(profile.contains("nodes") && profile.at("nodes").is_array(), "{}: missing field 'nodes' (a list)", origin);
  std::unordered_map<std::string, double> measured;
  std::vector<std::string> profile_order;
  const json& pnodes = profile.at("nodes");
  for (size_t i = 0; i < pnodes.size(); ++i) {
    const std::string path = fmt::format("nodes[{}]", i);
    check(pnodes[i].is_object() && pnodes[i].contains("name") && pnodes[i].at("name").is_string(),
          "{}: field '{}.name' is missing or not a string", origin, path);
    const std::string name = pnodes[i].at("name").get<std::string>();
    const double secs = number_field(pnodes[i], "seconds", path + ".seconds", origin);
    if (measured.emplace(name, secs).second) profile_order.push_back(name);
  }

  std::unordered_map<std::string, double> predicted, per_step;
  for (const auto& n : e.nodes) predicted[n.name] += n.seconds, per_step[n.name] += n.per_step_seconds;
  std::vector<std::string> not_in_profile, not_in_graph;
  std::unordered_set<std::string> in_graph;
  for (const auto& node : g.nodes()) {
    in_graph.insert(node.name);
    if (!measured.count(node.name)) not_in_profile.push_back(node.name);
  }
  for (const auto& name : profile_order)
    if (!in_graph.count(name)) not_in_graph.push_back(name);
  check(not_in_profile.empty() && not_in_graph.empty(),
        "{}: the profile is of another graph: {} of the graph's {} nodes are not in it{}{}; {} of its {} nodes are "
        "not in the graph{}{} (profile and estimate need the same config, mode, batch, seq, precision and fusions)",
        origin, not_in_profile.size(), g.nodes().size(), not_in_profile.empty() ? "" : ": ",
        first_names(not_in_profile), not_in_graph.size(), profile_order.size(), not_in_graph.empty() ? "" : ": ",
        first_names(not_in_graph));

  for (size_t k = 0; k < kProfileCategoryCount; ++k) {
    const auto cat = static_cast<ProfileCategory>(k);
    c.categories.push_back({to_string(cat), category_label(cat), 0, 0, 0});
  }
  double measured_nodes = 0;
  for (const auto& node : g.nodes()) {
    ComparedNode n;
    n.name = node.name;
    n.kind = node.kind;
    n.category = profile_category_of(node.kind);
    // The profile adds a node's time over the micro-batches of a step; the optimizer runs once,
    // and so does a GEMM's weight packing or cast (per_step_seconds) when there are several.
    const bool per_micro_batch = node.phase == Phase::forward || node.phase == Phase::backward;
    const double once = c.accum > 1 ? per_step[node.name] : 0;
    n.predicted = per_micro_batch ? (predicted[node.name] - once) * c.accum + once : predicted[node.name];
    n.measured = measured.at(node.name);
    auto& row = c.categories[static_cast<size_t>(n.category)];
    row.predicted += n.predicted;
    row.measured += n.measured;
    row.nodes += 1;
    c.predicted_step += n.predicted;
    measured_nodes += n.measured;
    c.nodes.push_back(std::move(n));
  }
  // As in the profile: step time outside every node. Nothing in the estimate stands for it.
  c.categories[static_cast<size_t>(ProfileCategory::unattributed)].measured = c.measured_step - measured_nodes;
  return c;
}

}  // namespace bertlab::hw

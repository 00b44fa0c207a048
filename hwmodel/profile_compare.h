#pragma once
// Checks a CPU estimate against the runtime's own measurement: the per-node times that
// `bertlab profile --json` wrote for the same graph, matched by node name, summed per
// profiler category (runtime/profiler.h) and over the step. Nothing here prints.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hwmodel/estimate.h"
#include "runtime/graph.h"
#include "runtime/profiler.h"

namespace bertlab::hw {

struct ComparedNode {
  std::string name;
  OpKind kind{};
  ProfileCategory category{};
  double predicted = 0, measured = 0;  // seconds per step
};

struct CategoryComparison {
  std::string key, label;  // as `bertlab profile` prints them
  double predicted = 0, measured = 0;
  int nodes = 0;
};

struct ProfileComparison {
  int accum = 1;                // micro-batches per step in the profile
  double measured_step = 0;     // the profile's step_seconds
  double predicted_step = 0;    // sum of the predicted node times
  std::vector<ComparedNode> nodes;              // graph order
  std::vector<CategoryComparison> categories;   // every ProfileCategory in enum order; the
                                                // unattributed row has nothing predicted
  // Indices into `nodes`, the `n` largest |predicted - measured| first.
  std::vector<size_t> worst(size_t n) const;
};

// Throws Error unless `s` is a cpu description (`origin` names its file): only the CPU the
// profile ran on can be compared with it.
void check_comparable(const SystemDesc& s, const std::string& origin);

// Reads a `bertlab profile --json` file (format "bertlab-profile", version 1); throws Error
// naming the file and the field when it is not one (a sweep file is refused with a hint).
nlohmann::json load_profile(const std::string& path);

// Matches the estimate of `g` (made on a cpu system) with `profile` (from load_profile, or a
// JSON object of that format; `origin` names it in errors). Throws Error when the system is
// not a cpu, when the profile's run (batch, seq, mode, precision) differs from the graph's, or
// when node names differ (naming the first few on each side). A profile of K micro-batches
// per step (accum) ran every forward and backward node K times: their predictions count K
// times too.
ProfileComparison compare_with_profile(const Graph& g, const GraphEstimate& e, const nlohmann::json& profile,
                                       const std::string& origin);

}  // namespace bertlab::hw

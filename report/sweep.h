#pragma once
// Profiler sweeps and their reports: the --sweep arguments of `bertlab profile`, one row per
// configuration and category as CSV, a self-contained HTML page (report/html.cpp) and markdown
// for docs. Built on the profiler; nothing in runtime/ depends on it.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "runtime/machine.h"
#include "runtime/profiler.h"

namespace bertlab {

// The keys of a sweep: mode (infer | train), batch, seq (positive integers), precision (fp32 |
// bf16), accum (a positive integer). Columns: the enum; its name in --sweep, the CSV header and
// the points of the JSON; whether a configuration's label shows the value alone ("train fp32")
// rather than as key=value ("batch=8"). The CSV's columns and the labels follow this order.
#define BERTLAB_SWEEP_KEYS(X) \
  X(mode, "mode", true) X(batch, "batch", false) X(seq, "seq", false) X(precision, "precision", true) X(accum, "accum", false)
BERTLAB_ENUM(SweepKey, uint8_t, BERTLAB_SWEEP_KEYS)
#define BERTLAB_SWEEP_KEY_VALUE(id, name, alone) SweepKey::id,
inline constexpr std::array<SweepKey, enum_count<SweepKey>> kSweepKeys{BERTLAB_SWEEP_KEYS(BERTLAB_SWEEP_KEY_VALUE)};
#undef BERTLAB_SWEEP_KEY_VALUE
bool value_alone_in_label(SweepKey k);
// A configuration: each key's value as it is printed (a name, or a number in decimal).
using SweepPoint = std::map<SweepKey, std::string>;
// {"batch": "8", "mode": "train", ...}: a point in the profile's JSON.
nlohmann::json sweep_point_json(const SweepPoint& p);
// Parses "key=v1,v2" arguments and returns the cartesian product in argument order (first key
// outermost). Throws Error on an unknown key, a repeated key or a bad value.
std::vector<SweepPoint> parse_sweeps(const std::vector<std::string>& args);

struct SweepEntry {
  SweepPoint point;               // every sweep key, with the defaults filled in
  std::optional<Profile> profile;
  std::string skipped;            // why there is no profile
};
// One row per configuration and category (long format).
std::string sweep_csv(const std::vector<SweepEntry>& entries);
// A self-contained HTML page (inline CSS and SVG, no network): per configuration a stacked
// category bar, a category table and a roofline plot with one point per node.
std::string html_report(const std::vector<SweepEntry>& entries, const MachineInfo& machine,
                        const std::string& title);
// Markdown tables for docs: category shares per configuration and computed observations.
std::string markdown_report(const std::vector<SweepEntry>& entries, const MachineInfo& machine);

}  // namespace bertlab

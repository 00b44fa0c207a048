#pragma once
// Profiler sweeps and their reports: the --sweep arguments of `bertlab profile`, one row per
// configuration and category as CSV, a self-contained HTML page (report/html.cpp) and markdown
// for docs. Built on the profiler; nothing in runtime/ depends on it.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/machine.h"
#include "runtime/profiler.h"

namespace bertlab {

// Keys: batch, seq, accum (positive integers), precision (fp32 | bf16), mode (infer | train).
inline const std::vector<std::string>& sweep_keys() {
  static const std::vector<std::string> keys{"mode", "batch", "seq", "precision", "accum"};
  return keys;
}
using SweepPoint = std::map<std::string, std::string>;
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

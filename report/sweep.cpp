#include "report/sweep.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "base/error.h"

namespace bertlab {

namespace {
#define BERTLAB_SWEEP_KEY_ALONE(id, name, alone) alone,
constexpr std::array<bool, enum_count<SweepKey>> kValueAlone{BERTLAB_SWEEP_KEYS(BERTLAB_SWEEP_KEY_ALONE)};
#undef BERTLAB_SWEEP_KEY_ALONE
}  // namespace

bool value_alone_in_label(SweepKey k) { return kValueAlone.at(static_cast<size_t>(k)); }

nlohmann::json sweep_point_json(const SweepPoint& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : p) j[to_string(k)] = v;
  return j;
}

std::vector<SweepPoint> parse_sweeps(const std::vector<std::string>& args) {
  std::vector<std::pair<SweepKey, std::vector<std::string>>> axes;
  std::set<SweepKey> seen;
  for (const auto& a : args) {
    auto eq = a.find('=');
    check(eq != std::string::npos && eq > 0 && eq + 1 < a.size(),
          "--sweep '{}': expected key=value[,value...], e.g. batch=1,8,32", a);
    const std::string name = a.substr(0, eq);
    const auto parsed = enum_parse<SweepKey>(name);
    check(parsed.has_value(), "--sweep: unknown key '{}' (expected one of {})", name,
          fmt::join(enum_names(SweepKey{}), ", "));
    const SweepKey key = *parsed;
    check(seen.insert(key).second, "--sweep: key '{}' given twice", name);
    std::vector<std::string> values;
    std::stringstream ss(a.substr(eq + 1));
    for (std::string v; std::getline(ss, v, ',');) {
      check(!v.empty(), "--sweep '{}': empty value", a);
      if (key == SweepKey::precision) {
        v = to_string(precision_from_string(v, "--sweep precision"));
      } else if (key == SweepKey::mode) {
        check(enum_parse<RunMode>(v).has_value(), "--sweep mode: unknown value '{}' (expected {})", v,
              fmt::join(enum_names(RunMode{}), " or "));
      } else {
        size_t used = 0;
        long long x = 0;
        try {
          x = std::stoll(v, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        check(used == v.size() && x > 0, "--sweep {}: '{}' is not a positive integer", name, v);
      }
      values.push_back(v);
    }
    axes.emplace_back(key, values);
  }
  std::vector<SweepPoint> points{SweepPoint{}};
  for (const auto& [key, values] : axes) {
    std::vector<SweepPoint> next;
    for (const auto& p : points)
      for (const auto& v : values) {
        auto q = p;
        q[key] = v;
        next.push_back(q);
      }
    points = std::move(next);
  }
  return points;
}

std::string sweep_csv(const std::vector<SweepEntry>& entries) {
  std::string out;
  for (const SweepKey k : kSweepKeys) out += std::string(to_string(k)) + ",";
  out += "status,step_ms,category,label,ms,share_pct,gflop,mbytes,nodes\n";
  for (const auto& e : entries) {
    std::string prefix;
    for (const SweepKey k : kSweepKeys) prefix += (e.point.count(k) ? e.point.at(k) : "") + ",";
    if (!e.profile) {
      std::string reason = e.skipped;
      std::replace(reason.begin(), reason.end(), '"', '\'');
      out += fmt::format("{}\"skipped: {}\",,,,,,,,\n", prefix, reason);
      continue;
    }
    const auto& p = *e.profile;
    for (const auto& r : p.categories)
      out += fmt::format("{}ok,{:.4f},{},\"{}\",{:.4f},{:.3f},{:.4f},{:.3f},{}\n", prefix,
                         p.step_seconds * 1e3, r.key, r.label, r.seconds * 1e3,
                         100 * r.seconds / p.step_seconds, r.flops / 1e9, r.bytes / 1e6, r.nodes);
  }
  return out;
}

}  // namespace bertlab

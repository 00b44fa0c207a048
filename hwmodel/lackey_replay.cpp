#include "hwmodel/lackey_replay.h"

#include <cstdlib>
#include <string>
#include <unordered_map>

#include "hwmodel/tracesim.h"
#include "base/error.h"

namespace bertlab::hw {

namespace {

struct CoreTrace {
  std::istream* in = nullptr;
  uint64_t base = 0, bytes = 0, marker = 0, warm = 0;
  bool mapped = false, warming = false, counting = false, started = false, waiting = false, done = false;
  int64_t instructions = 0;
  std::unordered_map<uint64_t, int64_t> other_lines;  // between the markers
};

uint64_t field(const std::string& line, const char* key, bool required = true) {
  const auto at = line.find(key);
  check(at != std::string::npos || !required, "lackey trace: '#hwref' line without '{}': {}", key, line);
  return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + std::char_traits<char>::length(key), nullptr, 0);
}

}  // namespace

ReplayResult replay_lackey(const std::vector<std::istream*>& traces, const SystemDesc& s,
                           const std::vector<Operand>& operands, bool operands_only) {
  const int64_t P = static_cast<int64_t>(traces.size());
  check(P >= 1, "lackey replay: no traces");
  TraceSim sim(s, P);
  std::vector<int> ids;
  for (const auto& o : operands) ids.push_back(sim.operand(o.name));
  const int other = sim.operand("other");
  std::vector<CoreTrace> cores(P);
  for (int64_t c = 0; c < P; ++c) cores[c].in = traces[c];
  std::string line;
  // One data access of core c: map the address, find its operand, simulate.
  auto data = [&](int64_t c, CoreTrace& t, char kind, uint64_t addr, int64_t size) {
    if (t.mapped && addr == t.marker) {
      t.counting = !t.counting;
      // The first marker store: the core waits there until every core has reached its own.
      if (t.counting && !t.started) t.started = t.waiting = true;
      return;
    }
    if (t.mapped && t.warm != 0 && addr == t.warm) {
      t.warming = true;
      return;
    }
    if (!t.counting && !(t.warming && !t.started)) return;
    uint64_t a = addr + (static_cast<uint64_t>(c + 1) << 44);
    int op = other;
    if (t.mapped && addr >= t.base && addr < t.base + t.bytes) {
      const uint64_t off = addr - t.base;
      a = kRegionBase + off;
      for (size_t i = 0; i < operands.size(); ++i)
        if (off >= static_cast<uint64_t>(operands[i].offset) &&
            off < static_cast<uint64_t>(operands[i].offset + operands[i].bytes))
          op = ids[i];
    }
    if (op == other && t.counting) ++t.other_lines[addr / static_cast<uint64_t>(s.l1.line_bytes)];
    if (op == other && operands_only) return;
    sim.access(c, op, a, size, kind != 'L');  // 'S' store, 'M' modify (load and store)
  };
  // Advances core c by one instruction (or to the end of its trace).
  auto step = [&](int64_t c) {
    CoreTrace& t = cores[c];
    while (std::getline(*t.in, line)) {
      if (line.size() > 6 && line[0] == '#' && line.compare(0, 6, "#hwref") == 0) {
        t.base = field(line, "region=");
        t.bytes = field(line, "bytes=");
        t.marker = field(line, "marker=");
        t.warm = field(line, "warm=", false);
        t.mapped = true;
        continue;
      }
      if (line.size() < 4) continue;
      if (line[0] == 'I' && line[1] == ' ') {
        if (t.counting) ++t.instructions;
        return;
      }
      if (line[0] != ' ' || (line[1] != 'L' && line[1] != 'S' && line[1] != 'M') || line[2] != ' ') continue;
      char* end = nullptr;
      const uint64_t addr = std::strtoull(line.c_str() + 3, &end, 16);
      const int64_t size = (end && *end == ',') ? std::strtoll(end + 1, nullptr, 10) : 1;
      data(c, t, line[1], addr, size);
      if (t.waiting) return;
    }
    t.done = true;
  };
  for (int64_t live = P; live > 0;) {
    live = 0;
    int64_t waiting = 0;
    for (int64_t c = 0; c < P; ++c) {
      if (cores[c].done) continue;
      if (!cores[c].waiting) step(c);
      live += cores[c].done ? 0 : 1;
      waiting += !cores[c].done && cores[c].waiting ? 1 : 0;
    }
    // Every core at its start marker: the kernels start together on warm caches; what the
    // warm-up (from the store to `warm=` on) brought in stays, its counts are dropped.
    if (live > 0 && waiting == live) {
      sim.reset_counts();
      for (auto& t : cores) t.waiting = false;
    }
  }
  ReplayResult r;
  for (const auto& t : cores) {
    check(t.mapped, "lackey replay: a trace has no '#hwref region=... marker=...' line");
    r.instructions.push_back(t.instructions);
    r.other_lines.emplace_back(t.other_lines.begin(), t.other_lines.end());
  }
  r.traffic = sim.finish();
  return r;
}

}  // namespace bertlab::hw

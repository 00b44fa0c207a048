// The estimate's results: graph totals, and a node's time from its compute and traffic.
#include <algorithm>

#include "hwmodel/estimate_detail.h"
#include "hwmodel/latency.h"

namespace bertlab::hw {

double GraphEstimate::seconds() const {
  double t = 0;
  for (const auto& n : nodes) t += n.seconds;
  return t;
}
int64_t GraphEstimate::dram_bytes() const {
  int64_t b = 0;
  for (const auto& n : nodes) b += n.traffic.dram_bytes();
  return b;
}
double GraphEstimate::seconds_in(const std::string& r) const {
  double t = 0;
  for (const auto& n : nodes)
    if (n.region == r) t += n.seconds;
  return t;
}
int64_t GraphEstimate::dram_bytes_in(const std::string& r) const {
  int64_t b = 0;
  for (const auto& n : nodes)
    if (n.region == r) b += n.traffic.dram_bytes();
  return b;
}

namespace estimate_detail {


// Time from compute, memory stalls and their overlap on the busiest core, and the DRAM
// bandwidth all cores share.
void finish_time(NodeEstimate& n, const SystemDesc& s, const std::vector<double>& compute_per_core, bool terms) {
  const int64_t P = s.cores;
  const double lat = llc_miss_cycles(s, n.traffic);
  double busiest = 0;
  for (int64_t c = 0; c < P; ++c) {
    const double comp = c < (int64_t)compute_per_core.size() ? compute_per_core[c] : 0;
    const double l1 = c < (int64_t)n.traffic.l1_misses.size() ? n.traffic.l1_misses[c] : 0;
    const double llc = c < (int64_t)n.traffic.llc_misses.size() ? n.traffic.llc_misses[c] : 0;
    // Stalls of a core: every L1 miss waits for the LLC, every LLC miss for DRAM, with
    // memory_parallelism misses outstanding at once.
    const double mem = (l1 * l1_miss_cycles(s) + llc * lat) / s.memory_parallelism;
    const double t = std::max(comp, mem) + (1 - s.overlap) * std::min(comp, mem);
    if (t >= busiest) {
      busiest = t;
      n.compute_cycles = comp;
      n.memory_cycles = mem;
    }
  }
  n.dram_cycles = n.traffic.dram_bytes() / s.dram_bytes_per_cycle();
  n.cycles = std::max(busiest, n.dram_cycles);
  n.seconds = n.cycles / (s.clock_ghz * 1e9);
  term_if(terms, n, 
      "time: busiest core {:.0f} cycles = max(compute {:.0f}, memory stalls {:.0f}) + {:.0f}% of the "
      "smaller (overlap {}); DRAM bandwidth floor {:.0f} cycles ({} bytes at {} GB/s shared by {} "
      "core(s)); node {:.0f} cycles = {:.3f} us",
      busiest, n.compute_cycles, n.memory_cycles, 100 * (1 - s.overlap), s.overlap, n.dram_cycles,
      n.traffic.dram_bytes(), s.dram.peak_gbps, P, n.cycles, n.seconds * 1e6);
}

void describe_traffic(NodeEstimate& n, const SystemDesc& s, bool terms) {
  if (!terms) return;
  const Traffic& t = n.traffic;
  for (const auto& [name, o] : t.operands)
    term_if(terms, n, 
        "operand {}: {} DRAM line reads, {} line writes, {} row-buffer misses{}", name, o.read_lines, o.write_lines,
        o.row_misses, o.why.empty() ? std::string() : fmt::format("; fetched {}x: {}", o.refetch, o.why));
  term_if(terms, n, 
      "off-chip: {} bytes = {} lines of {} B = {} bursts of {} B; row buffer: {} hits, {} misses "
      "(rows of {} B)",
      t.dram_bytes(), t.read_lines() + t.write_lines(), t.line_bytes, t.bursts(), t.burst_bytes,
      t.row_hits(), t.row_misses(), s.dram.row_bytes);
}

}  // namespace estimate_detail

}  // namespace bertlab::hw

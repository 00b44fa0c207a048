#pragma once
// What one miss costs a blocking core: the latency path of gem5's classic caches, as gem5-X's
// configs build it (docs/hwmodel-aarch64.md lists the values and where they are set). Every
// model that charges misses (the in-order core's core_time, the array model's finish_time)
// charges them here. With the optional path fields absent (0) an L1 miss costs llc.hit_cycles
// and an LLC miss the DRAM latency, as the system files without them always described.
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

// An LLC access from the bus below the L1s (the L1s' misses, the table walker's reads): the
// bus's request latency (frontend + forward), the LLC's hit latency (max of tag and data for a
// parallel-access cache), the bus's response latency.
inline double llc_access_cycles(const SystemDesc& s) {
  return s.llc_bus.forward_cycles + s.llc.hit_cycles + s.llc_bus.response_cycles;
}

// An L1 miss served by the LLC: the L1's tag lookup that finds the miss (gem5 forwards the
// request after the tag latency), the LLC access, and the L1's response latency (the fill
// before the waiting load completes).
inline double l1_miss_cycles(const SystemDesc& s) {
  return s.l1.tag_cycles + llc_access_cycles(s) + s.l1.response_cycles;
}

// DRAM's latency for one line of traffic `t`: the row-buffer hit / miss mix of its DRAM lines
// (row_hit_ns, row_miss_ns), in core cycles; a row miss when there is no traffic to mix.
inline double dram_latency_cycles(const SystemDesc& s, const Traffic& t) {
  const int64_t lines = t.read_lines() + t.write_lines();
  const double miss = lines > 0 ? static_cast<double>(t.row_misses()) / static_cast<double>(lines) : 1.0;
  return (miss * s.dram.row_miss_ns + (1 - miss) * s.dram.row_hit_ns) * s.clock_ghz;
}

// What an LLC miss adds to an L1 miss: DRAM's latency and the LLC's response latency (the
// fill of the LLC before it answers; gem5 charges it on the return path of a miss only).
inline double llc_miss_cycles(const SystemDesc& s, const Traffic& t) {
  return dram_latency_cycles(s, t) + s.llc.response_cycles;
}

// A TLB miss: walk_levels page-table reads, each an LLC access (gem5-X's ARM table walker has no
// walk cache with the MinorCPU, and its port joins the L1s' on the bus to the LLC).
inline double tlb_walk_cycles(const SystemDesc& s) {
  return static_cast<double>(s.tlb.walk_levels) * llc_access_cycles(s);
}

}  // namespace bertlab::hw

#pragma once
// Replays memory-address traces, one per core, into the exact cache and DRAM simulator
// (tracesim.h): private L1s, a shared LLC, the DRAM request streams. Two trace formats hold
// the same events (instructions; loads, stores and modifies with address and size; the
// program's stderr lines): the text log of valgrind's lackey (`--trace-mem=yes --log-fd=2`),
// and the binary trace of bertlab's valgrind tool hwtrace (hwmodel/reference/valgrind/
// hw_main.c, which describes the format), far cheaper to write and to read (measured in
// docs/hwmodel.md, "Agreement"). The traced program (the reference driver, hwmodel/reference/)
// prints
//   #hwref region=<hex> bytes=<n> marker=<hex>
// (and optionally ` warm=<hex>`) before its kernel and stores to the marker address right
// before and right after it; only the accesses and instructions between the two stores are
// counted. The caches are simulated from the store to the warm address on (a warm-up that
// touches the kernel's stack and tables, not its operands); at the first marker store each
// core waits until all have reached theirs, then the counts restart from zero. Addresses inside the
// region are moved to kRegionBase (the operands of every core's process then coincide, as
// in one shared address space); others (stack) stay private per core.
#include <cstdint>
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "hwmodel/encoder_layer.h"
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

struct ReplayResult {
  std::vector<int64_t> instructions;  // per core, between the markers
  Traffic traffic;                    // l1_misses, llc_misses per core; DRAM lines per operand
  // Per core: the lines outside the operands (the kernel's stack, tables) touched between the
  // markers, line address -> accesses; what the core model's stack stream (core_model.h) is
  // measured from.
  std::vector<std::map<uint64_t, int64_t>> other_lines;
};

enum class TraceFormat { lackey, hwtrace };
TraceFormat trace_format_from_string(const std::string& s);  // "lackey" | "hwtrace"

// The cores advance in lock step, one instruction each per round (equal-speed in-order
// cores). `operands` names the region's buffers (their DRAM streams); accesses outside them
// belong to the operand "other" (the stack: spilled locals), or are left out when
// `operands_only` (what the schedule itself touches, as the core model sees it).
ReplayResult replay_traces(const std::vector<std::istream*>& traces, TraceFormat format, const SystemDesc& s,
                           const std::vector<Operand>& operands, bool operands_only = false);
inline ReplayResult replay_lackey(const std::vector<std::istream*>& traces, const SystemDesc& s,
                                  const std::vector<Operand>& operands, bool operands_only = false) {
  return replay_traces(traces, TraceFormat::lackey, s, operands, operands_only);
}

}  // namespace bertlab::hw

#pragma once
// A model of the arrangement paper's in-order cores running TiC-SAT's schedules
// (hwmodel/reference/kernels.h holds the reference implementation of the same loop nests):
// per core, the instructions the schedule executes, the array's issues, and the L1 and LLC
// misses and DRAM traffic of its accesses, simulated exactly (tracesim.h) from the
// schedule's address sequence at row granularity, the cores interleaved row by row.
//
// Instructions = per_unit x units + per_group x groups per (op, arrangement, S), where units
// are the innermost work items the schedule walks (GEMM: words streamed through the array;
// softmax, layernorm: elements per pass; transpose, residual add: words written; GELU:
// bytes) and groups the loop bodies around them (GEMM: tiles; row ops: rows; transposes:
// 4 x 4 blocks or S x S tiles; streams: calls). The two coefficients are the compiled
// kernel's per-iteration instruction counts, fitted by scripts/hwmodel_reference.sh from
// cachegrind runs at two calibration sequence lengths (32 and 64) and checked at 128 and 512.
//
// Time per core: instructions / core.issue_width (in-order) + array issues x cycles_per_issue
// + L1 misses x LLC hit latency + LLC misses x DRAM latency (the row-hit/miss mix of the
// op's DRAM lines) / memory_parallelism; an op takes the busiest core's time or its DRAM
// bytes at the peak bandwidth, whichever is longer.
#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "hwmodel/core_walk.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/system.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

struct CoreCoefficients {
  // (op, arrangement, S) -> {per_unit, per_group}; a missing entry counts zero instructions.
  std::map<std::tuple<LayerOp, Arrangement, int64_t>, std::array<double, 2>> entries;
};
CoreCoefficients load_coefficients(const std::string& path);
// `origin` names the document in error messages.
CoreCoefficients coefficients_from_json(const nlohmann::json& j, const std::string& origin);
// The instruction bases built into bertlab (hwmodel/reference/{aarch64,x86_64}_coefficients.json,
// embedded at build time): TiC-SAT's kernels for AArch64, the reference kernels for x86-64.
const CoreCoefficients& builtin_coefficients(CoreIsa isa);

// The compiled kernel's own stack lines (CoreStack, core_walk.h): one private line per entry,
// in L1 set `l1_set`, warm and dirty at the start and touched (read-modify-write) `per_step`
// times per schedule step on average, so that the frequently touched ones stay resident and
// take one way of their set from the operands. A rate of at most 1 is spread over the steps
// (a touch after the steps where its running sum passes a whole number); a rate above 1 is
// spread over the step's line accesses (a touch after an access where the running sum of
// per_step / accesses passes a whole number), at most one touch after each access, since a
// second touch with no operand access in between changes nothing. A property of the compiled
// binary (its frames, where its stack lies, how often each line is touched):
// scripts/hwmodel_reference.sh measures it from memory traces of the reference kernel. The
// default (none) is the paper-system default: the paper's AArch64 kernels are not available
// to measure; with 31 general registers TiC-SAT's loop nests can keep their state in
// registers, and its array instruction keeps its state in the array (docs/hwmodel.md, "The
// independent reference").

struct OpModel {
  std::vector<int64_t> units, groups;     // per core, the instruction model's events
  std::vector<int64_t> instructions;      // per core
  std::vector<int64_t> issues;            // per core: array instructions (weights, stream, drain)
  std::vector<int64_t> steps;             // per core: schedule steps (rows, lines), the stack's touches
  std::vector<int64_t> tlb_misses;        // per core: page walks (sys.tlb)
  Traffic traffic;                        // per core L1 / LLC misses, DRAM lines per operand
};
// sys.cores cores, sys.array.kernel = S.
OpModel model_op(LayerOp op, Arrangement a, const LayerDims& d, const SystemDesc& sys,
                 const CoreCoefficients& c, const CoreStack& stack = {});

// The cycles of an op, per component, on its busiest core (by total), and the DRAM floor.
struct OpTime {
  double instructions = 0, array = 0, l1_stall = 0, llc_stall = 0, tlb_stall = 0;  // busiest core
  double dram = 0;                                                                   // bytes / peak bandwidth
  size_t busiest = 0;                                                                // which core it is
  double core() const { return instructions + array + l1_stall + llc_stall + tlb_stall; }
  double total() const { return core() > dram ? core() : dram; }
};
OpTime op_time(const OpModel& m, const SystemDesc& sys);
// The same from per-core events of any walk (the estimate's nodes, estimate_core.cpp): per core
// instructions / issue_width, array instructions x cycles_per_issue, L1 misses x the LLC's hit
// latency, LLC misses x the DRAM latency of the traffic's row-hit/miss mix / memory_parallelism,
// TLB misses x walk_levels LLC accesses.
OpTime core_time(const std::vector<double>& instructions, const std::vector<int64_t>& issues,
                 const std::vector<int64_t>& tlb_misses, const Traffic& t, const SystemDesc& sys);

// docs/hwmodel-paper-table.md's tables: per S and cores, per region (attention, FFN) and
// arrangement, time split into instructions, array cycles, L1-miss and LLC-miss stalls and
// the DRAM-bandwidth floor; BWMA-over-RWMA speedups.
std::string paper_table_markdown(const LayerDims& d, const SystemDesc& sys, const CoreCoefficients& c);

}  // namespace bertlab::hw

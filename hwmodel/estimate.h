#pragma once
// Replays an op graph on a system: lowers every node to the work of its schedule under an
// arrangement (work.h), estimates its traffic analytically (analytic.h), its compute cycles
// (compute.h) and its time, with cores sharing DRAM bandwidth. Layout conversions that a
// consumer needs (K transposed for the attention scores) are charged as nodes of their own.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hwmodel/system.h"
#include "hwmodel/work.h"
#include "runtime/graph.h"

namespace bertlab::hw {

// in_order_core systems: the busiest core's time by component (core_model.h) and its events.
struct CoreBreakdown {
  double instructions = 0;   // the kernels' instructions (the array's excluded)
  double issue_cycles = 0;   // instructions / issue width
  double array_cycles = 0;   // array instructions x cycles_per_issue
  int64_t l1_misses = 0, llc_misses = 0;
  double l1_cycles = 0;      // L1 misses x the L1-miss path
  double llc_cycles = 0;     // LLC misses x (DRAM latency + the LLC's response) / memory parallelism (latency.h)
  int64_t tlb_misses = 0;
  double tlb_cycles = 0;     // TLB misses x the page walk (tlb.walk_levels LLC accesses, latency.h)
  double total() const { return issue_cycles + array_cycles + l1_cycles + llc_cycles + tlb_cycles; }
};

struct NodeEstimate {
  std::string name, op, model;  // model: gemm | rows | stream | convert | fallback-stream | cpu-roofline | cpu-calibrated
  std::string phase, region;    // region: attention | ffn | other
  double flops = 0;
  double compute_cycles = 0;    // busiest core: array issues incl. fill/drain, or scalar work
  double memory_cycles = 0;     // busiest core: L1-miss and DRAM stalls
  double dram_cycles = 0;       // DRAM bytes over the shared peak bandwidth
  double cycles = 0, seconds = 0;
  // cpu kinds, training: the part of `seconds` a step with gradient accumulation spends once,
  // not per micro-batch: the weight's packing or bf16 cast (the executor keeps that copy for
  // the step's micro-batches, StepContext::weights_version).
  double per_step_seconds = 0;
  int64_t tiles = 0, issues = 0;
  CoreBreakdown core;           // in_order_core systems only
  Traffic traffic;
  std::vector<std::string> terms;  // the estimate in words, for --explain
};

struct GraphEstimate {
  SystemDesc system;
  Arrangement arrangement = kBaselineArrangement;
  std::vector<NodeEstimate> nodes;
  double seconds() const;
  int64_t dram_bytes() const;
  double seconds_in(const std::string& region) const;
  int64_t dram_bytes_in(const std::string& region) const;
};

// Nodes with one signature (op kind, operand shapes, dtypes and aliasing, the heads and
// activation attributes) have one estimate on any system: classify once per graph, then
// each system estimates every class once.
struct NodeClasses {
  std::vector<int> class_of;  // per node id
  std::vector<int> first;     // per class: the node estimated for it
};
NodeClasses classify_nodes(const Graph& g);

// The walks of stream-only nodes that the configurations of one sweep share (bertlab estimate
// over the kernel sizes, core counts and arrangements of one system file). On an in_order_core
// system a node whose work is line streams alone with no TiC-SAT kernel to price it (the
// optimizer's updates, the gradient norm) starts from an empty simulator and walks its
// streams the same way whatever the kernel size and arrangement, as long as its operands lie
// at the same addresses: the key is the node, the streams' operands, addresses and extents,
// and the system without its kernel size. Thread-safe (the classes are estimated on OpenMP
// threads).
class StreamWalkMemo {
 public:
  std::optional<NodeEstimate> find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(m_);
    const auto it = map_.find(key);
    return it == map_.end() ? std::nullopt : std::optional<NodeEstimate>(it->second);
  }
  void put(const std::string& key, const NodeEstimate& n) {
    std::lock_guard<std::mutex> lock(m_);
    map_.emplace(key, n);
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(m_);
    return map_.size();
  }

 private:
  mutable std::mutex m_;
  std::unordered_map<std::string, NodeEstimate> map_;
};

struct EstimateOptions {
  const NodeClasses* classes = nullptr;  // from classify_nodes(g); computed when null
  StreamWalkMemo* stream_walks = nullptr;  // shared by a sweep's estimates of one graph (or none)
  bool terms = false;                    // the estimate in words for every node (slower)
  std::string explain;                   // ... or for this node only
};

// The largest K (reduction extent) of the graph's GEMMs: the rows of an S x S weight tile. A
// kernel larger than this pads the K of every GEMM with zeros.
int64_t largest_gemm_k(const Graph& g);
// Throws Error when the kernel exceeds largest_gemm_k(g); `what` names the field or flag.
void check_kernel_fits(const Graph& g, int64_t kernel, const std::string& what);
// An in_order_core system prices TiC-SAT's kernels, which exist for the paper's two arrangements
// only: any other is refused, naming the system, the arrangement and where to estimate it.
void check_arrangement_supported(const SystemDesc& s, Arrangement a);

GraphEstimate estimate_graph(const Graph& g, const SystemDesc& s, Arrangement a,
                             const EstimateOptions& o = {});

}  // namespace bertlab::hw

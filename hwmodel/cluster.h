#pragma once
// The multi-node estimate (the multi-node pretraining paper's question): one data-parallel
// training step on N nodes, and a whole pretraining run, from
//   - the node: a cpu-kind system (machine.json from `bertlab calibrate`, its calibrated CPU
//     model) that estimates every node of the training graph (estimate_graph);
//   - the network: per-node link bandwidth and per-message latency;
//   - the allreduce: ring or tree, gradient buckets overlapped with backward or not, fp32 or
//     bf16 on the wire, planned by the trainer's own planner (runtime/grad_sync.h).
// Schema and validation: docs/hwmodel-cluster.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/enum_table.h"

#include "hwmodel/system.h"
#include "runtime/graph.h"
#include "runtime/precision.h"

namespace bertlab::hw {

#define BERTLAB_ALLREDUCE_ALGORITHMS(X) X(ring, "ring") X(tree, "tree")
BERTLAB_ENUM(AllreduceAlgorithm, uint8_t, BERTLAB_ALLREDUCE_ALGORITHMS)

struct ClusterDesc {
  std::string name;
  std::vector<int64_t> nodes;        // node counts to estimate (each >= 1)
  SystemDesc node;                   // cpu kind (unless node_seconds is given)
  // Or the node measured: the per-node seconds of one micro-batch's step from `bertlab profile
  // --json` of the same graph ("node_profile"), used instead of the CPU model.
  std::map<std::string, double> node_seconds;
  std::string node_profile;
  double link_gbps = 0;              // each node's link, per direction, Gbit/s
  double latency_us = 0;             // per message, one way
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::ring;
  int64_t bucket_bytes = int64_t{25} << 20;
  bool overlap = true;
  Precision wire = Precision::fp32;
  // A whole run (optional): optimizer steps, and the price of one node-hour.
  int64_t steps = 0;
  double node_hour_cost = 0;
};
// Reads a cluster file; `node` may be inline or a path (relative to the file) to a
// machine.json or cpu-kind system. Errors name the file and the field.
ClusterDesc load_cluster(const std::string& path);

struct BucketTiming {
  int64_t bytes = 0;             // on the wire, per rank's buffer
  double ready_s = 0, start_s = 0, end_s = 0;  // from the start of the step
};

struct ClusterEstimate {
  int64_t nodes = 1, accum = 1;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // compute of one node, whole step
  double comm_s = 0;         // sum of the buckets' allreduce times (and the deferred rows' allgather)
  double rows_s = 0;         // overlapped: the allgather of the embedding rows (runtime/grad_sync.h)
  double exposed_comm_s = 0; // the part of it not hidden behind backward
  double step_s = 0;
  double single_node_step_s = 0;  // the same per-node work without communication
  double efficiency() const { return single_node_step_s / step_s; }
  std::vector<BucketTiming> buckets;
};

// One step of `g` (a training graph of the per-node micro-batch; its allreduce node, if any, is
// replaced by the network model) with `accum` micro-batches per step, on `nodes` nodes.
ClusterEstimate estimate_cluster(const Graph& g, const ClusterDesc& c, int64_t nodes, int64_t accum);

// Time of one allreduce of `bytes` over `nodes` nodes (0 on one node).
double allreduce_seconds(const ClusterDesc& c, int64_t nodes, double bytes);
// One allgather on `nodes` nodes in which each node contributes `bytes` (a ring: N - 1 steps).
double allgather_seconds(const ClusterDesc& c, int64_t nodes, double bytes);

}  // namespace bertlab::hw

// The multi-node estimate (hwmodel/cluster.h): the cluster file's errors, the allreduce cost
// formulas against a hand count, and the overlap timeline's invariants. Its agreement with
// measured 2-rank runs over a shaped link is scripts/cluster_check.sh (docs/hwmodel-cluster.md).
#include <catch2/catch.hpp>

#include <fstream>

#include "hwmodel/cluster.h"
#include "hwmodel/estimate.h"
#include "runtime/bert_builder.h"
#include "test_configs.h"
#include "test_util.h"

using namespace bertlab;
using namespace bertlab::hw;
using namespace bertlab::testing;
using Catch::Matchers::Contains;

namespace {

const char* kMachine = R"({
  "format": "bertlab-machine", "version": 1,
  "cpu": {"model": "hand-written cpu", "isa": "avx512_core_amx", "bf16": true, "logical_cpus": 2},
  "threads": 2, "date": "2026-01-01T00:00:00Z",
  "gemm_peak_gflops": {"f32": 100, "bf16": 400},
  "bandwidth_gbs": {"read": 12, "write": 8, "triad": 10, "triad_resident": 50},
  "bandwidth_resident_array_bytes": 4194304,
  "parallel_region_us": 2,
  "gemms": [{"name": "large", "precision": "f32", "batch": 1, "m": 1024, "n": 1024, "k": 1024, "gflops": 100}],
  "bandwidth_array_bytes": 268435456, "seconds_per_measurement": 1
})";

nlohmann::json cluster_json() {
  return nlohmann::json::parse(R"({"format": "bertlab-cluster", "name": "test", "nodes": [1, 2, 4, 8],
    "node": "machine.json", "network": {"bandwidth_gbps": 10, "latency_us": 5, "allreduce": "ring"},
    "allreduce": {"bucket_mb": 0.005, "overlap": true}, "run": {"steps": 100, "node_hour_cost": 2}})");
}

ClusterDesc load(const TempDir& dir, const nlohmann::json& j) {
  std::ofstream(dir / "machine.json") << kMachine;
  std::ofstream(dir / "cluster.json") << j.dump();
  return load_cluster((dir / "cluster.json").string());
}

Graph training_graph() {
  RunSpec r;
  r.batch = 2, r.seq = 16, r.mode = RunMode::train;
  return build_bert(small_train_config(), r);
}

}  // namespace

TEST_CASE("Cluster files: bad input names the file and the field", "[hwmodel][cluster][errors]") {
  TempDir dir("cluster");
  const ClusterDesc c = load(dir, cluster_json());
  CHECK(c.nodes == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(c.node.kind == SystemKind::cpu);  // the machine.json beside the file
  CHECK(c.bucket_bytes == static_cast<int64_t>(0.005 * (1 << 20)));
  struct Bad {
    const char* pointer;
    nlohmann::json value;
    const char* expect;
  };
  for (const Bad& b : {Bad{"/nodes", 0, "field 'nodes'"}, Bad{"/nodes", nlohmann::json::array(), "field 'nodes'"},
                       Bad{"/nodes", {2, 0}, "from 1 to"}, Bad{"/nodes", 2.5, "field 'nodes'"},
                       Bad{"/network/bandwidth_gbps", 0, "'network.bandwidth_gbps' must be above 0"},
                       Bad{"/network/bandwidth_gbps", -1, "'network.bandwidth_gbps' must be above 0"},
                       Bad{"/network/latency_us", -1, "'network.latency_us'"},
                       Bad{"/network/allreduce", "butterfly", "'network.allreduce': unknown value 'butterfly' (expected one of: ring, tree)"},
                       Bad{"/allreduce/bucket_mb", 0, "'allreduce.bucket_mb' must be above 0"},
                       Bad{"/allreduce/dtype", "fp16", "allreduce.dtype"},
                       Bad{"/node", "missing.json", "missing.json"},
                       Bad{"/format", "bertlab-system", "bertlab-cluster"}}) {
    auto j = cluster_json();
    j[nlohmann::json::json_pointer(b.pointer)] = b.value;
    INFO(b.pointer << " = " << b.value.dump());
    CHECK_THROWS_WITH(load(dir, j), Contains("cluster.json") && Contains(b.expect));
  }
  auto accel = cluster_json();
  accel["node"] = (source_dir() / "configs/systems/paper-ticsat.json").string();
  CHECK_THROWS_WITH(load(dir, accel), Contains("must describe a cpu"));
  // Through the CLI: an error and a non-zero exit.
  auto zero = cluster_json();
  zero["nodes"] = 0;
  std::ofstream(dir / "zero.json") << zero.dump();
  auto r = run_bertlab(fmt::format("estimate --cluster {} --config {} --train --batch 2 --seq 16", quote(dir / "zero.json"),
                                   quote(source_dir() / "configs/bert-tiny.json")));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Contains("zero.json") && Contains("nodes"));
}

TEST_CASE("Allreduce cost: ring and tree against a hand count", "[hwmodel][cluster]") {
  TempDir dir("cluster_cost");
  ClusterDesc c = load(dir, cluster_json());
  c.link_gbps = 8, c.latency_us = 10;  // 1 byte per ns, 10 us per message
  const double mb = 1e6;
  CHECK(allreduce_seconds(c, 1, mb) == 0);
  // Ring, 4 nodes: 6 steps of 10 us + 250 KB at 1 GB/s = 6 x 260 us.
  CHECK(allreduce_seconds(c, 4, mb) == Approx(6 * 260e-6));
  // Tree, 8 nodes: reduce and broadcast over 3 levels, 6 x (10 us + 1 ms).
  c.algorithm = AllreduceAlgorithm::tree;
  CHECK(allreduce_seconds(c, 8, mb) == Approx(6 * 1010e-6));
  CHECK(allreduce_seconds(c, 5, mb) == Approx(allreduce_seconds(c, 8, mb)));  // ceil(log2 5) = 3
  // Allgather, 4 nodes, 1 MB each: 3 steps of 10 us + 1 ms.
  CHECK(allgather_seconds(c, 1, mb) == 0);
  CHECK(allgather_seconds(c, 4, mb) == Approx(3 * 1010e-6));
}

TEST_CASE("Cluster step: one node has no communication; buckets start when ready, one at a time",
          "[hwmodel][cluster]") {
  TempDir dir("cluster_step");
  ClusterDesc c = load(dir, cluster_json());
  const Graph g = training_graph();
  const ClusterEstimate one = estimate_cluster(g, c, 1, 1);
  CHECK(one.comm_s == 0);
  CHECK(one.step_s == Approx(one.single_node_step_s));
  CHECK(one.step_s == Approx(one.forward_s + one.backward_s + one.optimizer_s));
  // Three micro-batches: 3x forward and backward, except the weights' packing, which the
  // executor does on the first micro-batch only (the cpu model's per_step_seconds, whose
  // value is hand-checked in test_hwmodel_cpu.cpp).
  double prep[2] = {0, 0};  // forward, backward
  for (const auto& n : estimate_graph(g, c.node, Arrangement::bwma).nodes)
    if (n.phase == "forward" || n.phase == "backward") prep[n.phase == "backward"] += n.per_step_seconds;
  CHECK(prep[0] > 0);  // fp32 training packs every linear weight before its forward GEMM
  const ClusterEstimate acc = estimate_cluster(g, c, 1, 3);
  CHECK(acc.forward_s == Approx(3 * one.forward_s - 2 * prep[0]));
  CHECK(acc.backward_s == Approx(3 * one.backward_s - 2 * prep[1]));
  CHECK(acc.step_s == Approx(3 * (one.forward_s + one.backward_s) - 2 * (prep[0] + prep[1]) + one.optimizer_s));
  for (int64_t n : {2, 4, 8}) {
    INFO(n << " nodes");
    c.overlap = true;
    const ClusterEstimate over = estimate_cluster(g, c, n, 1);
    c.overlap = false;
    const ClusterEstimate flat = estimate_cluster(g, c, n, 1);
    REQUIRE(over.buckets.size() > 1);
    REQUIRE(flat.buckets.size() == 1);
    CHECK(flat.exposed_comm_s == Approx(flat.comm_s));  // nothing hidden after backward
    CHECK(flat.step_s == Approx(one.step_s + flat.comm_s));
    CHECK(over.step_s <= flat.step_s * (1 + 1e-9) + over.comm_s - flat.comm_s);
    CHECK(over.exposed_comm_s <= over.comm_s + 1e-12);
    CHECK(over.efficiency() <= 1.0 + 1e-12);
    int64_t bytes = 0;
    for (size_t k = 0; k < over.buckets.size(); ++k) {
      const auto& b = over.buckets[k];
      CHECK(b.start_s >= b.ready_s);
      if (k > 0) CHECK(b.start_s >= over.buckets[k - 1].end_s);
      CHECK(b.end_s - b.start_s == Approx(allreduce_seconds(c, n, double(b.bytes))));
      bytes += b.bytes;
    }
    CHECK(bytes == flat.buckets[0].bytes);  // the same arena, cut into buckets
    // Overlapped, the deferred embedding rows are exchanged after backward; flat, they are in
    // the one allreduce.
    double bucket_s = 0;
    for (const auto& b : over.buckets) bucket_s += b.end_s - b.start_s;
    CHECK(over.rows_s > 0);
    CHECK(over.comm_s == Approx(bucket_s + over.rows_s));
    CHECK(flat.rows_s == 0);
    c.wire = Precision::bf16;
    CHECK(estimate_cluster(g, c, n, 1).buckets[0].bytes * 2 == flat.buckets[0].bytes);
    c.wire = Precision::fp32;
  }
}

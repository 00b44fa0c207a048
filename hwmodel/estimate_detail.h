#pragma once
// Shared by the files of the estimate (estimate.h), one per job: result totals and time
// (estimate_totals.cpp), address allocation (estimate_alloc.h), the CPU models
// (estimate_cpu.cpp), GEMM lowering (estimate_gemm.cpp), stream and row lowering
// (estimate_stream.cpp) and the driver (estimate.cpp). Not part of the public interface.
#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hwmodel/arrangement.h"
#include "hwmodel/core_walk.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/estimate.h"
#include "hwmodel/estimate_alloc.h"
#include "runtime/step_rules.h"  // the rules the executor runs a graph by, which the cpu model follows (CpuGraphFacts)

namespace bertlab::hw::estimate_detail {

// The builder's "region" attribute of the node (attention | ffn), "other" without one.
inline std::string region_of(const Node& node) {
  auto it = node.attrs.find("region");
  return it != node.attrs.end() && it->is_string() ? it->get<std::string>() : "other";
}

// One term of the estimate in words (--explain); formatted only when asked for.
template <class... Args>
void term_if(bool on, NodeEstimate& n, fmt::format_string<Args...> f, Args&&... args) {
  if (on) n.terms.push_back(fmt::format(f, std::forward<Args>(args)...));
}

// Time from compute, memory stalls and their overlap on the busiest core, and the DRAM
// bandwidth all cores share (estimate_totals.cpp).
void finish_time(NodeEstimate& n, const SystemDesc& s, const std::vector<double>& compute_per_core, bool terms);
// The traffic in words, when `terms` (estimate_totals.cpp).
void describe_traffic(NodeEstimate& n, const SystemDesc& s, bool terms);

// What the cpu model needs to know about the whole graph.
struct CpuGraphFacts {
  bool training = false;  // any backward node: weights are packed before every linear GEMM
  std::vector<char> shared_dy;  // per node: bf16 dX/dW pairs sharing dy's cast (shared_dy_casts)
  std::vector<uint8_t> shared_attn;  // per node: attention inputs read from an earlier cast (shared_attention_casts)
  std::vector<char> handoff;    // per tensor, inference: bf16 from one linear layer to the next (bf16_linear_handoffs)
  std::vector<uint8_t> fused;   // per node: the nodes its step runs (fused_steps; 0: run by an earlier one)
  std::vector<KeptXCast> kept_x;  // per node, bf16 training: kept_x_casts
};
// A node on a CPU description (estimate_cpu.cpp): the roofline or the calibrated model.
NodeEstimate cpu_node(const Graph& g, const Node& node, const SystemDesc& s, const CpuGraphFacts& facts, bool terms);
// The calibrated model, after cpu_node on every node: each run of optimizer nodes
// (runtime::optimizer_runs, `runs`) priced on its first node as the executor runs it; `terms`
// says for which nodes the estimate is put in words.
void cpu_optimizer_runs(const Graph& g, const SystemDesc& s, std::vector<NodeEstimate>& nodes,
                        const std::vector<int64_t>& runs, const std::function<bool(const Node&)>& terms);

// An accelerator node lowered to the schedules of its arrangement: GEMMs (estimate_gemm.cpp),
// row ops and streams (estimate_stream.cpp), the dispatch (estimate.cpp).
class NodeModel {
 public:
  NodeModel(const Graph& g, const SystemDesc& s, Arrangement a, StreamWalkMemo* stream_walks = nullptr)
      : g_(g), s_(s), a_(a), low_(g, s, a), core_(s.in_order_cores()),
        stream_walks_(stream_walks) {}

  // `terms`: also write the estimate in words (slow: formatting); off in sweeps.
  std::vector<NodeEstimate> run(const Node& node, bool terms);

 private:
  template <class... Args>
  void term(NodeEstimate& n, fmt::format_string<Args...> f, Args&&... args) {
    term_if(terms_, n, f, std::forward<Args>(args)...);
  }

  NodeEstimate base(const Node& node, const std::string& model) {
    NodeEstimate n;
    n.name = node.name;
    n.op = to_string(node.kind);
    n.model = model;
    n.flops = node_flops(g_, node);
    return n;
  }

  // Scalar work of a non-GEMM op on the cores, rows split evenly.
  std::vector<double> scalar_compute(double flops) {
    return std::vector<double>(s_.cores, flops / s_.core_flops_per_cycle / s_.cores);
  }

  void lower_gemm(const Node& node, const GemmShape& gm, std::vector<NodeEstimate>& out);
  bool lower_attention(const Node& node, GemmRole role, GemmWork& w, StreamWork& extra, std::string& lowering);
  void array_gemm(const Node& node, const GemmShape& gm, GemmWork& w, StreamWork& extra, bool converted,
                  const std::string& lowering, std::vector<NodeEstimate>& out);

  // The A operand of product i when it is the transpose of a stored activation `src`
  // (dY^T for dW, dS^T for dK, P^T for dV).
  // RWMA: a row-major transpose first (a conversion node reads src once and writes the
  //   transposed copy once), then the GEMM streams rows of the copy.
  // BWMA: no conversion: A's panel kb is the row of S x S tiles of src at rows kb*S..; each
  //   tile is read whole and fed to the array transposed, so A streams the same lines as a
  //   panel of a matrix stored in the B arrangement (stand-in: a matrix of A's extent).
  MatrixView transposed_a(const Node& node, const GemmShape& gm, const MatrixView& src, int64_t i);

  // The heads of the attention that reads `qkv` (a linear node's output), when the system runs
  // the projections per head (in_order_core, qkv per_head); 0 when they run fused. Forward
  // nodes only: the backward pass reads and writes the fused qkv.
  int64_t per_head_qkv(int qkv);
  // Head h's Q, K or V (part 0, 1, 2) of `qkv` under per_head: a buffer of its own, rows x d.
  MatrixView head_buffer(int qkv, int part, int64_t h, int64_t rows, int64_t d) {
    return low_.fresh(fmt::format("{}#{}{}", g_.tensor(qkv).name, "qkv"[part], h), rows, d);
  }

  // Backward GEMMs of the training graph: operands read in place where their storage is
  // already the arrangement the schedule needs, transposed operands as transposed_a().
  bool backward_gemm(const Node& node, const GemmShape& gm, GemmWork& w, std::string& lowering);

  NodeEstimate rows(const Node& node, std::vector<int> ins, int passes, std::vector<int> vectors = {},
                    std::vector<int> vector_outputs = {});

  NodeEstimate elementwise(const Node& node);

  // Embedding backward: each token's gradient row (in the arrangement: gathered from the
  // panels under BWMA) is added into one row of each table (row-major tables,
  // read-modify-write of a contiguous row); the ids are streamed.
  NodeEstimate embedding_grad(const Node& node);

  // Optimizer (AdamW, LAMB), the gradient norm and the data-parallel gradient allreduce: pure
  // streams over the fp32 master parameters, gradients and moments (their graph dtypes,
  // whatever the accelerator's element size); layout-independent. A tensor updated in place
  // (parameter, moments; every gradient of the allreduce) is one read-modify-write stream:
  // each line fetched once and written back once. Read-only inputs are read once. For the
  // allreduce this is its local memory traffic only: the interconnect is not modelled.
  NodeEstimate optimizer(const Node& node);

  NodeEstimate embedding(const Node& node);

  // Kinds this model does not know: every input read once and every output written once
  // (node_min_bytes), rescaled from the graph's dtypes to the system's element size.
  NodeEstimate fallback(const Node& node);

  const Graph& g_;
  const SystemDesc& s_;
  Arrangement a_;
  Lowering low_;
  int64_t S_() const { return s_.array.kernel; }
  const ArrangementDesc& arr() const { return arrangement_desc(a_); }

  // in_order_core systems (estimate_core.cpp): the lowered work walked by the core model.
  // A GEMM node (and its conversion node, when `converted`); the transposes of the
  // conversion are conv_pairs_ (else extra_conv_'s streams).
  void core_gemm(const Node& node, const GemmShape& gm, const GemmWork& w, const StreamWork& extra, bool converted,
                 const std::string& lowering, std::vector<NodeEstimate>& out);
  // A row op: TiC-SAT's passes (every_pass_writes: softmax; else layernorm), its instructions
  // by `kernel` (none: FLOPs), `vectors` streamed.
  NodeEstimate core_rows(const Node& node, const RowWork& w, bool every_pass_writes, std::optional<LayerOp> kernel,
                         const StreamWork& vectors, const std::string& what);
  // Streams line by line, instructions by `kernel` per unit_bytes (none: FLOPs). Without a kernel,
  // walked once per sweep (stream_walks_: the same walk on every kernel size and arrangement).
  NodeEstimate core_stream(const Node& node, const StreamWork& w, std::optional<LayerOp> kernel, int64_t unit_bytes,
                           const std::string& what, const char* model = "stream");

  // Whether the graph has a backward pass (computed once).
  bool training() {
    if (training_ < 0) {
      training_ = 0;
      for (const auto& node : g_.nodes()) training_ |= node.phase == Phase::backward ? 1 : 0;
    }
    return training_ == 1;
  }

  StreamWork extra_conv_, extra_stream_;
  // The context's copy from its buffer per head into its rows (qkv per_head under RWMA).
  StreamWork head_copy_;
  std::map<int, int64_t> qkv_heads_;  // per_head_qkv's answers
  std::vector<TransposePair> conv_pairs_;
  int training_ = -1;
  bool core_ = false;
  bool terms_ = false;
  StreamWalkMemo* stream_walks_ = nullptr;
  std::string stream_walk_system_;  // the system without its kernel size, for stream_walks_ (once)
};

}  // namespace bertlab::hw::estimate_detail

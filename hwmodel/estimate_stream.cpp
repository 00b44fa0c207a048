// Stream and row lowering of the estimate: row ops (softmax, layernorm and their
// gradients, the embedding), elementwise streams, the optimizer and the fallback.
#include <algorithm>

#include "hwmodel/analytic.h"
#include "hwmodel/estimate_detail.h"

namespace bertlab::hw::estimate_detail {

NodeEstimate NodeModel::rows(const Node& node, std::vector<int> ins, int passes, std::vector<int> vectors,
                  std::vector<int> vector_outputs) {
  NodeEstimate n = base(node, "rows");
  const Mats m = mats_of(g_.tensor(node.outputs[0]));
  RowWork w;
  w.rows = m.rows;
  w.len = m.cols;
  w.passes = passes;
  for (size_t i = 0; i < ins.size(); ++i) w.input_names.push_back(fmt::format("in{}", i));
  for (int64_t b = 0; b < m.batch; ++b) {
    RowMatrix rm;
    for (int t : ins) rm.inputs.push_back(low_.matrix(t, b));
    rm.output = low_.matrix(node.outputs[0], b);
    w.matrices.push_back(rm);
  }
  StreamWork v;
  for (int t : vectors) v.accesses.push_back({g_.tensor(t).name, low_.whole(g_.tensor(t).name, g_.tensor(t).numel() * s_.elem_bytes), false});
  for (int t : vector_outputs) v.accesses.push_back({g_.tensor(t).name, low_.whole(g_.tensor(t).name, g_.tensor(t).numel() * s_.elem_bytes), true});
  if (core_) {
    // TiC-SAT's row kernels: softmax in two passes that both write (exp and row sum, then
    // divide), layernorm in three that write in the last (sum, variance, normalise); their
    // gradients walk their passes the same way, priced by the forward kernel's counts.
    bool every = false;
    std::optional<LayerOp> kernel;
    switch (op_info(node.kind).family) {
      case HwFamily::softmax: w.passes = 2, every = true, kernel = LayerOp::softmax; break;
      case HwFamily::softmax_grad: kernel = LayerOp::softmax; break;
      case HwFamily::layernorm: w.passes = 3, kernel = LayerOp::layernorm; break;
      case HwFamily::layernorm_grad: kernel = LayerOp::layernorm; break;
      case HwFamily::gemm:
      case HwFamily::stream:
      case HwFamily::embedding:
      case HwFamily::embedding_grad:
      case HwFamily::update:
      case HwFamily::generic: break;
    }
    return core_rows(node, w, every, kernel, v, "row op");
  }
  n.traffic = analytic_traffic(w, s_, s_.cores);
  n.traffic.add(analytic_traffic(v, s_, s_.cores));
  term(n, "row op over {} matrix(es) of {} rows x {} ({} pass(es) over each row): {}",
                                m.batch, m.rows, m.cols, passes,
                                arr().row_access);
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

NodeEstimate NodeModel::elementwise(const Node& node) {
  NodeEstimate n = base(node, "stream");
  StreamWork w;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const int t = node.inputs[i];
    w.accesses.push_back({fmt::format("in{}", i), low_.whole(g_.tensor(t).name, low_.tensor_bytes(t)), false});
  }
  w.accesses.push_back({"out", low_.whole(g_.tensor(node.outputs[0]).name, low_.tensor_bytes(node.outputs[0])), true});
  if (core_) {  // TiC-SAT's element-wise kernels: a lookup per element (activations), else an add per word
    const bool lookup = node.kind == OpKind::activation;
    return core_stream(node, w, lookup ? LayerOp::gelu : LayerOp::residual_add,
                       lookup ? s_.elem_bytes : s_.array.bytes_per_issue,
                       lookup ? "element-wise lookup in storage order (TiC-SAT's GELU kernel)"
                              : "element-wise in storage order, priced as TiC-SAT's residual add per word");
  }
  n.traffic = analytic_traffic(w, s_, s_.cores);
  term(n, "{}", "elementwise: layout-independent, every operand streamed once in storage order");
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

NodeEstimate NodeModel::embedding_grad(const Node& node) {
  NodeEstimate n = base(node, "rows");
  const Mats m = mats_of(g_.tensor(node.inputs[0]));
  RowWork w;
  w.rows = m.rows;
  w.len = m.cols;
  w.input_names = {"dout"};
  w.output_name = "word_rows";
  RowMatrix rm;
  rm.inputs.push_back(low_.matrix(node.inputs[0], 0));
  rm.output = low_.fresh(node.name + "#word_rows", m.rows, m.cols, 0, 1, true);
  w.matrices.push_back(rm);
  StreamWork other;
  const int64_t rows_bytes = m.rows * m.cols * s_.elem_bytes;
  for (const char* t : {"position_rows", "type_rows"}) {
    other.accesses.push_back({t, low_.whole(node.name + "#" + t, rows_bytes), false});
    other.accesses.push_back({t, low_.whole(node.name + "#" + t, rows_bytes), true});
  }
  for (int i = 1; i < 3; ++i)
    other.accesses.push_back({fmt::format("ids{}", i), low_.whole(g_.tensor(node.inputs[i]).name, g_.tensor(node.inputs[i]).numel() * 4), false});
  if (core_) return core_rows(node, w, false, std::nullopt, other, "embedding backward: gradient rows added into the tables");
  n.traffic = analytic_traffic(w, s_, s_.cores);
  n.traffic.add(analytic_traffic(other, s_, s_.cores));
  term(n, "embedding backward: {} gradient rows {} added into a row of each row-major table", m.rows,
       arr().rows_gathered);
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

NodeEstimate NodeModel::optimizer(const Node& node) {
  NodeEstimate n = base(node, "stream");
  StreamWork w;
  const bool writes = node.kind != OpKind::grad_norm;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const TensorDesc& t = g_.tensor(node.inputs[i]);
    const bool in_place = writes && std::find(node.outputs.begin(), node.outputs.end(), t.id) != node.outputs.end();
    if (in_place) continue;  // its read is the fetch of the output's read-modify-write
    w.accesses.push_back({node.kind == OpKind::grad_norm ? "grads" : fmt::format("in{}", i), low_.whole(t.name, t.bytes()), false});
  }
  if (writes)
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const TensorDesc& t = g_.tensor(node.outputs[i]);
      w.accesses.push_back({fmt::format("out{}", i), low_.whole(t.name, t.bytes()), true});
    }
  if (core_) return core_stream(node, w, std::nullopt, 1, fmt::format("{}: every operand streamed once at its graph dtype", n.op));
  n.traffic = analytic_traffic(w, s_, s_.cores);
  term(n, "{}: every operand streamed once in storage order at its graph dtype (fp32 state), updated tensors read-modify-written{}", n.op,
       node.kind == OpKind::allreduce ? "; local traffic only, the interconnect is not modelled" : "");
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

NodeEstimate NodeModel::embedding(const Node& node) {
  NodeEstimate n = base(node, "rows");
  const TensorDesc& out = g_.tensor(node.outputs[0]);
  const Mats m = mats_of(out);
  RowWork w;
  w.rows = m.rows;
  w.len = m.cols;
  w.input_names = {"word_rows", "position_rows", "type_rows"};
  RowMatrix rm;
  // Gathered table rows (row-major tables): modelled as distinct contiguous rows.
  for (const auto& nm : w.input_names) rm.inputs.push_back(low_.fresh(node.name + "#" + nm, m.rows, m.cols, 0, 1, true));
  rm.output = low_.matrix(node.outputs[0], 0);
  w.matrices.push_back(rm);
  StreamWork ids;
  for (int i = 0; i < 2; ++i)
    ids.accesses.push_back({fmt::format("ids{}", i), low_.whole(g_.tensor(node.inputs[i]).name, g_.tensor(node.inputs[i]).numel() * 4), false});
  if (core_) return core_rows(node, w, false, std::nullopt, ids, "embedding: a row of each table gathered and summed");
  n.traffic = analytic_traffic(w, s_, s_.cores);
  n.traffic.add(analytic_traffic(ids, s_, s_.cores));
  term(n, "embedding: {} tokens gather a row of each table (row-major) and write the sum {}",
                                m.rows, arr().rows_scattered);
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

NodeEstimate NodeModel::fallback(const Node& node) {
  NodeEstimate n = base(node, "fallback-stream");
  int64_t graph_bytes = 0, sys_bytes = 0;
  for (int t : node.inputs) graph_bytes += g_.tensor(t).bytes(), sys_bytes += g_.tensor(t).numel() * s_.elem_bytes;
  int64_t out_graph = 0, out_sys = 0;
  for (int t : node.outputs) out_graph += g_.tensor(t).bytes(), out_sys += g_.tensor(t).numel() * s_.elem_bytes;
  graph_bytes += out_graph;
  sys_bytes += out_sys;
  const double scale = graph_bytes > 0 ? static_cast<double>(sys_bytes) / graph_bytes : 1;
  const int64_t min_bytes = node_min_bytes(g_, node);
  const int64_t total = static_cast<int64_t>(min_bytes * scale);
  const int64_t write = std::min<int64_t>(out_sys, total);
  StreamWork w;
  if (total - write > 0) w.accesses.push_back({"reads", low_.whole(node.name + "#reads", total - write), false});
  if (write > 0) w.accesses.push_back({"writes", low_.whole(node.name + "#writes", write), true});
  if (core_) return core_stream(node, w, std::nullopt, 1, fmt::format("fallback: no model for op '{}', its minimal bytes streamed", n.op), "fallback-stream");
  n.traffic = analytic_traffic(w, s_, s_.cores);
  term(n, 
      "fallback: no specific model for op '{}', generic streaming model: node_min_bytes {} x element size "
      "{} / graph dtype = {} bytes, outputs {} bytes",
      n.op, min_bytes, s_.elem_bytes, total, write);
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, scalar_compute(n.flops), terms_);
  return n;
}

}  // namespace bertlab::hw::estimate_detail

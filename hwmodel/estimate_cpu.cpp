// The CPU models of the estimate (docs/hwmodel-cpu.md): a roofline of measured peaks, and
// the model calibrated by `bertlab calibrate`.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "base/error.h"
#include "hwmodel/estimate_detail.h"
#include "runtime/op_rules.h"  // activation_of

namespace bertlab::hw::estimate_detail {

namespace {

// The plain roofline of a CPU described by measured peaks ("cpu_model": "roofline"): one GEMM
// peak (the system's precision) for every GEMM, DRAM triad bandwidth for every node. Kept to
// show what the calibrated model below improves on (docs/hwmodel-cpu.md).
NodeEstimate cpu_roofline_node(const Graph& g, const Node& node, const SystemDesc& s, bool terms) {
  NodeEstimate n;
  n.model = "cpu-roofline";
  n.flops = node_flops(g, node);
  const double peak = s.gemm_peak_gflops.at(file_key(s.precision)).get<double>() * 1e9;
  const double bytes = static_cast<double>(node_min_bytes(g, node));
  const double t_comp = node.category == Category::gemm ? n.flops / peak : 0;
  const double t_mem = bytes / (s.dram.peak_gbps * 1e9);
  n.seconds = std::max(t_comp, t_mem);
  n.cycles = n.seconds * s.clock_ghz * 1e9;
  term_if(terms, n, "roofline: max(FLOPs {:.3g} / peak {:.3g} GFLOP/s, bytes {:.3g} / {} GB/s) = {:.3f} us",
                                n.flops, peak / 1e9, bytes, s.dram.peak_gbps, n.seconds * 1e6);
  return n;
}

// The measured GEMM closest in shape to `gm` among those of precision `prec` (the distance is
// the sum of squared log ratios of batch, m, n and k, so a shape twice as tall counts as far
// as one half as tall); null when calibrate measured none of that precision.
const GemmCalibration* nearest_measured_gemm(const SystemDesc& s, const GemmShape& gm, Precision prec) {
  const GemmCalibration* best = nullptr;
  double best_d = 0;
  auto sq_log = [](double a, double b) { return std::pow(std::log(a / b), 2); };
  for (const auto& r : s.gemm_rates) {
    if (r.precision != prec) continue;
    const double d = sq_log(gm.batch, r.batch) + sq_log(gm.m, r.m) + sq_log(gm.n, r.n) + sq_log(gm.k, r.k);
    if (!best || d < best_d) best = &r, best_d = d;
  }
  return best;
}

// Bandwidth of data that stays in the cache (the resident triad; the DRAM triad when it was
// not measured).
double resident_gbps(const SystemDesc& s) { return s.resident_gbps > 0 ? s.resident_gbps : s.dram.peak_gbps; }

// Whether a node's `bytes` stream at the cache-resident triad (a forward node whose bytes fit
// the LLC reads what the node before it just wrote) rather than the DRAM triad (cpu_node).
bool streams_resident(const SystemDesc& s, const Node& node, double bytes) {
  return s.resident_gbps > 0 && node.phase == Phase::forward && bytes <= s.llc.size_bytes;
}

// The rate of a GEMM of `gm` in precision `prec`: the nearest measured shape's, else the
// precision's peak (FLOP/s). A description without that peak is an error naming the node.
double gemm_rate(const SystemDesc& s, const Node& node, const GemmShape& gm, Precision prec) {
  const char* key = file_key(prec);
  check(s.gemm_peak_gflops.contains(key) && s.gemm_peak_gflops.at(key).is_number(),
        "node '{}' is a {} GEMM, but system '{}' has no field 'gemm_peak_gflops.{}' (calibrate on a CPU with native "
        "bf16 matmul, or estimate the fp32 graph)",
        node.name, key, s.name, key);
  const GemmCalibration* near = nearest_measured_gemm(s, gm, prec);
  return (near ? near->gflops : s.gemm_peak_gflops.at(key).get<double>()) * 1e9;
}

// The attention scores, softmax and context run as one (runtime::fused_steps, ops::FusedAttention),
// priced on the scores node:
//   time = parallel region + max(FLOPs of the two products / their measured rates, bytes /
//          bandwidth) + in-cache bytes / resident bandwidth
// where bytes are what goes through memory (qkv and the mask bias read, the context written)
// and the in-cache bytes are the probabilities' passes: the scores written, softmax's three
// passes over them (max, sum, output) and the context product reading them, plus in bf16 the
// copies of Q, K, V (read 4 B, or 2 B from a bf16 qkv, write 2 B per element) and of the
// probabilities (read 4 B, write 2 B).
NodeEstimate cpu_attention_run(const Graph& g, const Node& node, const SystemDesc& s, const CpuGraphFacts& facts,
                               bool terms) {
  NodeEstimate n;
  n.model = "cpu-calibrated";
  const Node &soft = g.node(node.id + 1), &ctx = g.node(node.id + kFusedAttention - 1);
  const Precision prec = gemm_precision(node);
  double t_gemm = 0;
  for (const Node* p : {&node, &ctx}) t_gemm += node_flops(g, *p) / gemm_rate(s, *p, *node_gemm(g, *p), prec);
  n.flops = node_flops(g, node) + node_flops(g, soft) + node_flops(g, ctx);
  auto bytes_of = [&](int t) { return static_cast<double>(g.tensor(t).bytes()); };
  const double bytes = bytes_of(node.inputs.at(0)) + bytes_of(node.inputs.at(1)) + bytes_of(ctx.outputs.at(0));
  const double probs = bytes_of(node.outputs.at(0));  // f32 scores, as many as probabilities
  double cached = probs * (1 + 3 + 1);                // written, softmax's passes, read by the context
  if (prec == Precision::bf16) {
    const bool qkv16 = facts.handoff.at(static_cast<size_t>(node.inputs.at(0))) != 0;
    const double qkv_elems = static_cast<double>(g.tensor(node.inputs.at(0)).numel());
    cached += qkv_elems * ((qkv16 ? 2 : 4) + 2) + probs / 4 * (4 + 2);
  }
  const double gbps = streams_resident(s, node, bytes) ? s.resident_gbps : s.dram.peak_gbps;
  const double t_mem = bytes / (gbps * 1e9), t_cache = cached / (resident_gbps(s) * 1e9);
  n.seconds = s.parallel_region_seconds + std::max(t_gemm, t_mem) + t_cache;
  n.cycles = n.seconds * s.clock_ghz * 1e9;
  term_if(terms, n,
          "attention scores, softmax and context in one pass (runtime::fused_steps): parallel region {:.2f} us + "
          "max(two {} products {:.3f} us at their measured rates, bytes {:.3g} / {:.4g} GB/s) + in-cache bytes {:.3g} "
          "/ {:.4g} GB/s = {:.3f} us",
          s.parallel_region_seconds * 1e6, file_key(prec), t_gemm * 1e6, bytes, gbps, cached, resident_gbps(s), n.seconds * 1e6);
  return n;
}

// The element-wise kernel of a node whose time is vector compute rather than bytes, as
// calibrate measured it (ops::ElementwiseKernel): the forward and backward of a rated
// activation (its row in ops/activation.h), and the dropout (forward and backward regenerate
// the mask: a hash per element); none for the others.
std::optional<ops::ElementwiseKernel> elementwise_kernel(const Node& node) {
  using K = ops::ElementwiseKernel::Kind;
  if (node.kind == OpKind::activation || node.kind == OpKind::activation_grad) {
    const ops::Activation act = activation_of(node);
    if (!ops::activation_info(act).rated) return std::nullopt;
    return ops::ElementwiseKernel{node.kind == OpKind::activation ? K::activation : K::activation_grad, act};
  }
  if (node.kind == OpKind::dropout || node.kind == OpKind::dropout_grad)
    return ops::ElementwiseKernel{K::dropout, ops::Activation::none};
  return std::nullopt;
}

}  // namespace

// A node on this CPU, from what `bertlab calibrate` measured ("cpu_model": "calibrated"):
//   GEMM nodes: time = parallel-region cost x calls + max(FLOPs / rate, bytes / bandwidth)
//               + conversion bytes / bandwidth, where rate is that of the nearest measured
//               GEMM shape of the node's own precision, and the conversions are the reorders
//               the executor runs around the matmul that calibrate's GEMMs did not (bf16
//               copies of f32 operands, the per-step packing of training weights).
//   other nodes: time = parallel-region cost + max(FLOPs / f32 peak, bytes / bandwidth +
//               re-reads / resident bandwidth), re-reads being the extra passes of row ops
//               over their inputs, as the accelerator model counts them (rows()): softmax 3
//               passes (max, sum, output), layernorm 2 (statistics, output), softmax_grad 2
//               (row sum, dx), layernorm_grad 3 (statistics, the two row sums, dx). A row
//               the first pass brought in is re-read from cache, wherever the first came from.
//   fused runs (runtime::fused_steps): a pair (a dropout and the add it alone feeds, a
//               dropout_grad and the softmax_grad it alone feeds) is priced on its first node
//               as one pass of both (the tensor between them never written); the attention
//               scores, softmax and context run (ops::FusedAttention) as its two products at
//               their measured rates, qkv, mask and context through memory, the scores and
//               probabilities only through the cache (cpu_attention_run); the other nodes of
//               a run at zero.
//   bandwidth: the cache-resident triad for a forward node whose bytes fit in the LLC (it
//   reads what the node before it just wrote); the DRAM triad for backward nodes (they read
//   activations saved during the forward pass, long since evicted: hundreds of MB for
//   BERT-base at batch 8), optimizer nodes (each parameter, gradient and moment is touched
//   once per step, 28 bytes per parameter in all), nodes larger than the LLC, and when the
//   resident triad was not measured.
NodeEstimate cpu_node(const Graph& g, const Node& node, const SystemDesc& s, const CpuGraphFacts& facts, bool terms) {
  if (s.cpu_model == CpuModel::roofline) return cpu_roofline_node(g, node, s, terms);
  NodeEstimate n;
  n.model = "cpu-calibrated";
  const size_t at = static_cast<size_t>(node.id);
  if (facts.fused.at(at) == 0) {  // a node before ran this one's work
    term_if(terms, n, "{}: run in one pass by a node before it (runtime::fused_steps) = 0 us", to_string(node.kind));
    return n;
  }
  if (facts.fused.at(at) == kFusedAttention) return cpu_attention_run(g, node, s, facts, terms);
  // A recomputation whose only reader, a bf16 dW GEMM, reads the forward linear layer's kept
  // bf16 copy of x instead (runtime::kept_x_casts): the executor does not run it.
  const KeptX kept_x = facts.kept_x.at(at).role;
  if (kept_x == KeptX::skipped) {
    term_if(terms, n, "{}: not run, its reader takes the forward's kept bf16 copy (runtime::kept_x_casts) = 0 us",
            to_string(node.kind));
    return n;
  }
  // A node that runs the next node's work too (runtime::fused_steps, a pair) is priced as one
  // pass of the pair: its inputs read once, the next node's output written once (the tensor
  // between them is never written), the FLOPs of both.
  const Node* next = facts.fused.at(at) == kFusedPair ? &g.node(node.id + 1) : nullptr;
  n.flops = node_flops(g, node) + (next ? node_flops(g, *next) : 0);
  double bytes = static_cast<double>(node_min_bytes(g, node));
  if (next) {
    const int between = node.outputs.at(0);
    bytes -= static_cast<double>(g.tensor(between).bytes());
    for (int t : next->inputs)
      if (t != between) bytes += static_cast<double>(g.tensor(t).bytes());
    for (int t : next->outputs) bytes += static_cast<double>(g.tensor(t).bytes());
  }
  const bool resident = streams_resident(s, node, bytes);
  const double gbps = resident ? s.resident_gbps : s.dram.peak_gbps;
  const char* where = resident ? "cache-resident triad" : "DRAM triad";
  const double region = s.parallel_region_seconds;
  const auto gemm = node.category == Category::gemm ? node_gemm(g, node) : std::nullopt;
  if (!gemm) {
    // Scalar work at the f32 GEMM peak is only a floor: these nodes are memory-bound.
    const double peak = s.gemm_peak_gflops.at("f32").get<double>() * 1e9;
    auto in_bytes = [&](size_t i) { return static_cast<double>(g.tensor(node.inputs.at(i)).bytes()); };
    double rereads = 0;
    // The fused dropout_grad + softmax_grad: the second pass over each row re-reads y (the
    // dropped-out row of dy sits in a row buffer). The fused dropout + add: a stream.
    if (next) {
      if (next->kind == OpKind::softmax_grad) rereads = static_cast<double>(g.tensor(next->inputs.at(1)).bytes());
    } else switch (op_info(node.kind).family) {
      case HwFamily::softmax: rereads = 2 * in_bytes(0); break;
      case HwFamily::layernorm: rereads = in_bytes(0); break;
      case HwFamily::softmax_grad: rereads = in_bytes(0) + in_bytes(1); break;
      case HwFamily::layernorm_grad: rereads = 2 * (in_bytes(0) + in_bytes(1)); break;
      case HwFamily::gemm:
      case HwFamily::stream:
      case HwFamily::embedding:
      case HwFamily::embedding_grad:
      case HwFamily::update:
      case HwFamily::generic: break;
    }
    const double reread_gbps = resident_gbps(s);
    // A kernel that is vector compute (erf, the dropout hash): its elements at the rate
    // calibrate measured for it, when measured, bound the time from below as FLOPs do.
    const auto kernel = elementwise_kernel(node);
    const auto index = kernel ? ops::elementwise_index(*kernel) : std::nullopt;
    const double rate = index ? s.elementwise_gelem_per_s.at(*index) : 0;  // 0: not calibrated, bytes alone
    const double elements = static_cast<double>(g.tensor(node.outputs.at(0)).numel());
    const double t_elem = rate > 0 ? elements / (rate * 1e9) : 0;
    const double t_comp = std::max(n.flops / peak, t_elem);
    const double t_mem = bytes / (gbps * 1e9) + rereads / (reread_gbps * 1e9);
    n.seconds = region + std::max(t_comp, t_mem);
    term_if(terms, n,
            "{} parallel region {:.2f} us + max(FLOPs {:.3g} / f32 peak {:.4g} GFLOP/s, elements {:.3g} / measured "
            "{} {:.4g} G/s, bytes {:.3g} / {} {:.4g} GB/s + row re-reads {:.3g} / {:.4g} GB/s) = {:.3f} us",
            to_string(node.kind), region * 1e6, n.flops, peak / 1e9, rate > 0 ? elements : 0.0,
            kernel ? ops::to_string(*kernel) + (rate > 0 ? "" : " (not calibrated)") : "(none)", rate, bytes, where, gbps, rereads, reread_gbps,
            n.seconds * 1e6);
    n.cycles = n.seconds * s.clock_ghz * 1e9;
    return n;
  }
  const Precision prec_type = gemm_precision(node);
  const char* prec = file_key(prec_type);
  const double rate = gemm_rate(s, node, *gemm, prec_type);
  const GemmCalibration* near = nearest_measured_gemm(s, *gemm, prec_type);  // named in the terms
  // Operand elements of the product: A (batch x m x k) and B (k x n, per product unless a
  // linear layer's shared weight).
  const double a_elems = static_cast<double>(gemm->batch) * gemm->m * gemm->k;
  const double b_elems = static_cast<double>(node.kind == OpKind::linear ? 1 : gemm->batch) * gemm->k * gemm->n;
  // Reorders the executor runs in the node besides the matmul (ops/bf16.h, ops/matmul.h):
  // bf16 rounds each f32 operand into a dense bf16 copy (read 4 B, write 2 B per element),
  // except an inference weight, packed in bf16 once at load time; training packs each linear
  // weight before its GEMM (read 4 B, write the packed 4 B f32 or 2 B bf16), which in bf16 is
  // that operand's conversion, and in f32 also packs B of the dX and dW GEMMs (the weight, and
  // x); the tied MLM decoder (> 32 MB) is read unpacked instead (runtime::gemm_b_packed). In bf16
  // a linear_grad_weight reads the copy of dy its layer's linear_grad_input made
  // (runtime::shared_dy_casts), so only its x is converted; in inference a linear layer whose
  // x another linear layer wrote in bf16 (bf16_linear_handoffs) reads it as it is, so it
  // converts nothing (its weight was packed in bf16 at load time). An attention backward GEMM
  // reads the copies an earlier GEMM left (runtime::shared_attention_casts: bit i is graph
  // input i, which is A except for context_grad_v, whose A is input 1, the probabilities).
  const bool bf16 = prec_type == Precision::bf16;
  const double e_gemm = bf16 ? 2 : 4;
  double convert_bytes = 0;
  int calls = 1;  // the matmul
  const bool b_packed = facts.training && gemm_b_packed(g, node);
  const bool b_is_weight = node.kind == OpKind::linear || node.kind == OpKind::linear_grad_input;
  const bool dy_shared = node.kind == OpKind::linear_grad_weight && facts.shared_dy.at(at);
  const unsigned attn = facts.shared_attn.at(at);
  const unsigned attn_a = node.kind == OpKind::attn_context_grad_v ? 2u : 1u;  // the bit of A's input
  auto handed = [&](size_t i) { return facts.handoff.at(size_t(node.inputs.at(i))) != 0; };
  // A is bf16 probabilities a dropout wrote (bf16_probs_handoffs): P of the context product, P^T of dV.
  const bool probs16 = (node.kind == OpKind::attn_context && handed(0)) ||
                       (node.kind == OpKind::attn_context_grad_v && handed(1));
  const bool a_ready = dy_shared || (attn & attn_a) || probs16 || (node.kind == OpKind::linear && handed(0));
  double weight_bytes = 0;  // training: the weight's packing or cast, once per optimizer step
  if (bf16) {
    // Inference: attention products whose qkv a linear layer wrote in bf16 (bf16_linear_handoffs)
    // copy Q, K (scores) or V (context) from it, reading 2 B per element instead of 4.
    const bool qkv16 = (node.kind == OpKind::attn_scores && handed(0)) || (node.kind == OpKind::attn_context && handed(1));
    const double a_in = node.kind == OpKind::attn_scores && qkv16 ? 2 : 4, b_in = qkv16 ? 2 : 4;
    if (!a_ready) convert_bytes += a_elems * (a_in + e_gemm), ++calls;
    // B is x of a dW GEMM whose forward linear layer kept its bf16 copy: nothing to convert.
    const bool b_ready = kept_x == KeptX::reads || (attn & (3u ^ attn_a));
    if ((node.kind != OpKind::linear || facts.training) && !b_ready) convert_bytes += b_elems * (b_in + e_gemm), ++calls;
    if (facts.training && b_is_weight) weight_bytes = b_elems * (4 + e_gemm);
  } else if (b_packed) {
    convert_bytes += b_elems * (4 + e_gemm), ++calls;
    if (b_is_weight) weight_bytes = b_elems * (4 + e_gemm);
  }
  // With accumulation the executor prepares the weight on a step's first micro-batch only: that
  // reorder (its bytes and its parallel region) is spent once per step.
  if (weight_bytes > 0) n.per_step_seconds = region + weight_bytes / (gbps * 1e9);
  // The bias gradient of linear_grad_weight: a second pass over dy (its column sums) in its
  // own parallel region, unless its layer's dX GEMM summed dy while casting it (bf16 shared dy:
  // ops::cast_rows_summing_columns, in the same pass).
  if (node.kind == OpKind::linear_grad_weight && !dy_shared) {
    convert_bytes += static_cast<double>(g.tensor(node.inputs[0]).bytes());
    ++calls;
  }
  const double t_gemm = n.flops / rate, t_mem = bytes / (gbps * 1e9), t_conv = convert_bytes / (gbps * 1e9);
  n.seconds = calls * region + std::max(t_gemm, t_mem) + t_conv;
  n.cycles = n.seconds * s.clock_ghz * 1e9;
  term_if(terms, n,
          "{} GEMM batch {} m {} n {} k {}: {} parallel region(s) x {:.2f} us + max(FLOPs {:.3g} / {:.4g} GFLOP/s "
          "({}), bytes {:.3g} / {} {:.4g} GB/s) + reorders {:.3g} bytes / {:.4g} GB/s = {:.3f} us",
          prec, gemm->batch, gemm->m, gemm->n, gemm->k, calls, region * 1e6, n.flops, rate / 1e9,
          near ? fmt::format("measured '{}' batch {} m {} n {} k {}", near->name, near->batch, near->m, near->n, near->k)
               : fmt::format("the {} peak: no measured shapes", prec),
          bytes, where, gbps, convert_bytes, gbps, n.seconds * 1e6);
  return n;
}

// A run of optimizer nodes (runtime::optimizer_runs) is one step of the executor, booked on
// the run's first node: priced there as the sum of its nodes' passes over their tensors, with one
// parallel region per pass of the fused kernel (AdamW one, LAMB two: its trust ratios need every
// tensor's norms first) instead of one per node; the run's other nodes at zero. Models the
// executor's fuse_optimizer_steps (ops::adamw_update_fused, lamb_update_fused).
void cpu_optimizer_runs(const Graph& g, const SystemDesc& s, std::vector<NodeEstimate>& nodes,
                        const std::vector<int64_t>& runs, const std::function<bool(const Node&)>& terms) {
  for (size_t first = 0; first < runs.size(); ++first) {
    if (runs[first] <= 1) continue;
    const Node& head = g.node(static_cast<int>(first));
    const int passes = head.kind == OpKind::lamb_update ? 2 : 1;
    const double region = s.parallel_region_seconds;
    NodeEstimate& n = nodes.at(first);
    double passes_seconds = 0;  // the nodes' times without their own parallel regions
    for (int64_t i = 0; i < runs[first]; ++i) {
      NodeEstimate& m = nodes.at(first + static_cast<size_t>(i));
      passes_seconds += m.seconds - region;
      if (i == 0) continue;
      m.seconds = m.cycles = 0;
      m.terms.clear();
      term_if(terms(g.node(static_cast<int>(first + i))), m,
              "{}: updated in one step by the run's first node {} (runtime::optimizer_runs) = 0 us",
              to_string(head.kind), head.name);
    }
    n.seconds = passes * region + passes_seconds;
    n.cycles = n.seconds * s.clock_ghz * 1e9;
    term_if(terms(head), n,
            "a run of {} {} nodes in one step (runtime::optimizer_runs): their passes {:.3f} us + {} parallel "
            "region(s) x {:.2f} us = {:.3f} us",
            runs[first], to_string(head.kind), passes_seconds * 1e6, passes, region * 1e6, n.seconds * 1e6);
  }
}

}  // namespace bertlab::hw::estimate_detail

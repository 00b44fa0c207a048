// The estimate on in_order_core systems (the arrangement paper's tightly coupled cores): every
// node's work (lowered as for the other models: the same operands, placements and
// conversions) walked through TiC-SAT's schedules by the core model (core_walk.h), and its
// time per core from instructions, array issues and cache misses (core_model.h's op_time).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "base/error.h"
#include "hwmodel/core_model.h"
#include "hwmodel/core_walk.h"
#include "hwmodel/estimate_detail.h"
#include "hwmodel/latency.h"

namespace bertlab::hw::estimate_detail {

namespace {

// One node's walk: parts run one after another through one simulator on the same cores, the
// instructions of each counted by its kernel's coefficients.
class CorePricer {
 public:
  CorePricer(const SystemDesc& s, Arrangement a) : s_(s), a_(a), sim_(s), instr_(s.cores, 0.0), issues_(s.cores, 0) {}
  int operand(const std::string& name) { return sim_.operand(name); }

  // Walks `shares` (one per core). kernel: the TiC-SAT kernel whose instructions per unit and
  // per group price them; none: work no kernel of TiC-SAT does, priced by add_scalar.
  void run(std::vector<CoreShare>& shares, std::optional<LayerOp> kernel, NodeEstimate& n, bool terms) {
    sim_.run(shares);
    std::array<double, 2> k{0, 0};
    if (kernel) {
      const auto& e = builtin_coefficients(s_.core_isa).entries;
      const auto it = e.find({*kernel, a_, s_.array.kernel});
      check(it != e.end(), "core model: no {} instruction counts of '{}' {} at S = {}", to_string(s_.core_isa),
            info(*kernel).name, to_string(a_), s_.array.kernel);
      k = it->second;
    }
    int64_t units = 0, groups = 0, issues = 0;
    for (size_t c = 0; c < shares.size(); ++c) {
      instr_[c] += std::round(k[0] * shares[c].units + k[1] * shares[c].groups);
      issues_[c] += shares[c].issues;
      units += shares[c].units, groups += shares[c].groups, issues += shares[c].issues;
      n.tiles += kernel && info(*kernel).gemm ? shares[c].groups : 0;
    }
    n.issues += issues;
    if (kernel)
      term_if(terms, n, "kernel {} ({}, S = {}, {} counts): {} units x {} + {} groups x {} = {:.0f} instructions{}",
              info(*kernel).name, to_string(a_), s_.array.kernel, to_string(s_.core_isa), units, k[0], groups, k[1],
              k[0] * units + k[1] * groups, issues > 0 ? fmt::format(", {} array instructions", issues) : "");
  }
  // Instructions of work no TiC-SAT kernel does: its FLOPs at core.flops_per_cycle, split evenly.
  void add_scalar(double flops, NodeEstimate& n, bool terms) {
    if (flops <= 0) return;
    for (auto& x : instr_) x += std::round(flops / s_.core_flops_per_cycle / s_.cores);
    term_if(terms, n, "no TiC-SAT kernel for this work: {:.0f} FLOPs at {} per cycle, split over {} core(s)", flops,
            s_.core_flops_per_cycle, s_.cores);
  }

  // The node's time: the core model's (core_time), its busiest core or its DRAM bytes at peak
  // bandwidth, whichever is longer.
  void finish(NodeEstimate& n, bool terms) {
    n.traffic = sim_.finish();
    describe_traffic(n, s_, terms);
    const OpTime t = core_time(instr_, issues_, sim_.tlb_misses(), n.traffic, s_);
    CoreBreakdown& best = n.core;
    best.instructions = instr_[t.busiest];
    best.issue_cycles = t.instructions;
    best.array_cycles = t.array;
    best.l1_misses = n.traffic.l1_misses[t.busiest];
    best.l1_cycles = t.l1_stall;
    best.llc_misses = n.traffic.llc_misses[t.busiest];
    best.llc_cycles = t.llc_stall;
    best.tlb_misses = sim_.tlb_misses()[t.busiest];
    best.tlb_cycles = t.tlb_stall;
    n.compute_cycles = best.issue_cycles + best.array_cycles;
    n.memory_cycles = best.l1_cycles + best.llc_cycles + best.tlb_cycles;
    n.dram_cycles = t.dram;
    n.cycles = std::max(best.total(), n.dram_cycles);
    n.seconds = n.cycles / (s_.clock_ghz * 1e9);
    const double lat = best.llc_misses > 0 ? best.llc_cycles / best.llc_misses : 0;
    term_if(terms, n,
            "time (busiest core of {}): instructions {:.0f} / issue width {} = {:.0f} cycles + array {:.0f} + L1 misses "
            "{} x {} = {:.0f} + LLC misses {} x {:.1f} = {:.0f} + TLB misses {} x {} = {:.0f} = {:.0f} cycles; DRAM floor "
            "{:.0f} cycles ({} bytes at {} GB/s); node {:.0f} cycles = {:.3f} us",
            s_.cores, best.instructions, s_.issue_width, best.issue_cycles, best.array_cycles, best.l1_misses,
            l1_miss_cycles(s_), best.l1_cycles, best.llc_misses, lat, best.llc_cycles,
            best.tlb_misses, tlb_walk_cycles(s_), best.tlb_cycles, best.total(), n.dram_cycles,
            n.traffic.dram_bytes(), s_.dram.peak_gbps, n.cycles, n.seconds * 1e6);
  }

 private:
  const SystemDesc& s_;
  Arrangement a_;
  CoreSim sim_;
  std::vector<double> instr_;
  std::vector<int64_t> issues_;
};

// A StreamWork's accesses as line streams (a strided sweep: one stream per segment).
std::vector<LineStream> line_streams(CorePricer& p, const StreamWork& w) {
  std::vector<LineStream> v;
  for (const auto& acc : w.accesses) {
    const int id = p.operand(acc.operand);
    for (int64_t i = 0; i < acc.sweep.count; ++i)
      v.push_back({id, acc.sweep.start + static_cast<uint64_t>(i * acc.sweep.stride), acc.sweep.width, acc.write});
  }
  return v;
}

void run_lines(CorePricer& p, const SystemDesc& s, const std::vector<LineStream>& streams, std::optional<LayerOp> kernel,
               int64_t unit_bytes, NodeEstimate& n, bool terms) {
  if (streams.empty()) return;
  std::vector<CoreShare> shares;
  for (int64_t c = 0; c < s.cores; ++c) shares.push_back(line_share(streams, unit_bytes, s, c));
  p.run(shares, kernel, n, terms);
}

// The TiC-SAT GEMM kernel whose instruction counts price a GEMM node: the attention products
// by their operand shapes (scores: (L,d) x (d,L); context: (L,L) x (L,d)), the dense layers by
// N against K (the qkv, attention-output, FFN-in and FFN-out kernels differ by under 0.5%).
LayerOp gemm_kernel(const GemmShape& gm) {
  switch (gm.role) {
    case GemmRole::scores:
    case GemmRole::context_grad_probs: return LayerOp::scores;
    case GemmRole::context:
    case GemmRole::scores_grad_q:
    case GemmRole::scores_grad_k:
    case GemmRole::context_grad_v: return LayerOp::context;
    case GemmRole::dense:
    case GemmRole::dense_grad_input:
    case GemmRole::dense_grad_weight: break;
  }
  if (gm.n == 3 * gm.k) return LayerOp::qkv;
  if (gm.n > gm.k) return LayerOp::ffn_in;
  if (gm.n < gm.k) return LayerOp::ffn_out;
  return LayerOp::attn_out;
}

}  // namespace

void NodeModel::core_gemm(const Node& node, const GemmShape& gm, const GemmWork& w, const StreamWork& extra,
                          bool converted, const std::string& lowering, std::vector<NodeEstimate>& out) {
  const int64_t P = s_.cores, S = S_();
  if (converted) {
    NodeEstimate conv = base(node, "convert");
    conv.name = node.name + ".convert";
    conv.op = "convert";
    conv.flops = 0;
    CorePricer p(s_, a_);
    if (!conv_pairs_.empty()) {
      const int src = p.operand("transpose_src"), dst = p.operand("transpose_dst");
      std::vector<CoreShare> shares;
      for (int64_t c = 0; c < P; ++c) shares.push_back(transpose_share(conv_pairs_, S, P, c, src, dst));
      term(conv, "layout conversion for '{}' under {}: {} transpose(s) of {} x {} as TiC-SAT's K transpose ({})",
           node.name, to_string(a_), conv_pairs_.size(), conv_pairs_.front().src.rows, conv_pairs_.front().src.cols,
           arr().transpose);
      p.run(shares, LayerOp::k_transpose, conv, terms_);
    } else {  // a generic transposed operand: read once and written once, priced as a transpose per word
      term(conv, "layout conversion for '{}' under {}: the transposed operand read once and written once", node.name,
           to_string(a_));
      run_lines(p, s_, line_streams(p, extra_conv_), LayerOp::k_transpose, s_.array.bytes_per_issue, conv, terms_);
    }
    p.finish(conv, terms_);
    out.push_back(conv);
    extra_conv_.accesses.clear();
    conv_pairs_.clear();
  }
  NodeEstimate n = base(node, "gemm");
  CorePricer p(s_, a_);
  term(n, "{}: GEMM batch {} x (M {} x N {} x K {}), {} x {} tiles of {}x{} per product{}", lowering,
       w.instances.size(), gm.m, gm.n, gm.k, w.k / S, w.n / S, S, S,
       (w.k != gm.k || w.n != gm.n) ? fmt::format(" (K, N padded to {}, {})", w.k, w.n) : "");
  const int a = p.operand(w.a_name), b = p.operand(w.b_name), y = p.operand(w.y_name);
  std::vector<CoreShare> shares;
  for (int64_t c = 0; c < P; ++c) shares.push_back(gemm_share(w, s_, c, a, b, y));
  p.run(shares, gemm_kernel(gm), n, terms_);
  // The epilogue as TiC-SAT runs it, after the GEMM: the residual added word by word into the
  // output (its residual add kernel), the activation looked up element by element (its GELU
  // kernel); vectors (bias, the bias gradient, the mask) streamed without a kernel of their own.
  const MatrixView& y0 = w.instances.front()[2];
  const int64_t out_bytes = w.m * w.instances.size() * y0.cols * y0.elem;
  const uint64_t out_base = y0.base;
  StreamWork plain;
  for (const auto& acc : extra.accesses) {
    if (acc.operand != "residual") {
      plain.accesses.push_back(acc);
      continue;
    }
    term(n, "residual added into the output ({} bytes)", out_bytes);
    run_lines(p, s_, {{p.operand("residual"), acc.sweep.start, acc.sweep.width, false}, {y, out_base, out_bytes, true}},
              LayerOp::residual_add, s_.array.bytes_per_issue, n, terms_);
  }
  if (gm.role == GemmRole::dense && node.attrs.is_object() && node.attrs.contains("activation")) {
    term(n, "activation {} looked up over the output", node.attrs.at("activation").dump());
    run_lines(p, s_, {{y, out_base, out_bytes, true}}, LayerOp::gelu, y0.elem, n, terms_);
  }
  if (!head_copy_.accesses.empty()) {
    // TiC-SAT's multihead_transpose: a loop of 4-byte word copies, priced by its nearest kernel
    // in the instruction basis, the residual add's loop of words (a load, a store and the loop per
    // word, plus the add that the copy does without).
    term(n, "the heads' context copied from its buffer per head into the rows of the output ({} bytes, TiC-SAT's "
         "multihead_transpose; instructions of the residual add's word loop)",
         head_copy_.accesses.front().sweep.width);
    run_lines(p, s_, line_streams(p, head_copy_), LayerOp::residual_add, s_.array.bytes_per_issue, n, terms_);
    head_copy_.accesses.clear();
  }
  run_lines(p, s_, line_streams(p, plain), std::nullopt, 1, n, terms_);
  p.finish(n, terms_);
  out.push_back(n);
}

NodeEstimate NodeModel::core_rows(const Node& node, const RowWork& w, bool every_pass_writes, std::optional<LayerOp> kernel,
                                  const StreamWork& vectors, const std::string& what) {
  NodeEstimate n = base(node, "rows");
  CorePricer p(s_, a_);
  std::vector<int> ins;
  for (const auto& nm : w.input_names) ins.push_back(p.operand(nm));
  const int out = p.operand(w.output_name);
  // TiC-SAT's row kernels write their rows in place: so does the estimate where the result
  // may replace the input (the op table's in-place rule: softmax), and for layernorm in an
  // inference graph, whose input (the residual sum) dies at the node; a training graph keeps
  // it for the backward pass.
  const HwFamily family = op_info(node.kind).family;
  const bool in_place = op_info(node.kind).in_place == InPlace::yes || (family == HwFamily::layernorm && !training());
  std::vector<RowMats> mats;
  for (const auto& m : w.matrices) mats.push_back({m.inputs, in_place ? m.inputs.front() : m.output});
  std::vector<CoreShare> shares;
  for (int64_t c = 0; c < s_.cores; ++c)
    shares.push_back(row_share(mats, w.rows, w.len, w.passes, every_pass_writes, s_.l1.line_bytes, s_.cores, c, ins, out));
  term(n, "{}: {} matrix(es) of {} rows x {}, {} pass(es) over each row ({})", what, w.matrices.size(), w.rows, w.len,
       w.passes, arr().row_access);
  p.run(shares, kernel, n, terms_);
  if (!kernel) p.add_scalar(n.flops, n, terms_);
  run_lines(p, s_, line_streams(p, vectors), std::nullopt, 1, n, terms_);
  p.finish(n, terms_);
  return n;
}

NodeEstimate NodeModel::core_stream(const Node& node, const StreamWork& w, std::optional<LayerOp> kernel,
                                    int64_t unit_bytes, const std::string& what, const char* model) {
  // No kernel prices the streams: their walk (from an empty simulator) and FLOPs depend on the
  // operands' addresses and extents and on the system, not on the kernel size or arrangement.
  std::string key;
  if (stream_walks_ && !kernel && !terms_) {
    if (stream_walk_system_.empty()) {
      nlohmann::json j = system_to_json(s_);
      j["array"].erase("kernel");
      stream_walk_system_ = j.dump();
    }
    key = fmt::format("{}|{}|{}|{}", node.id, unit_bytes, model, stream_walk_system_);
    for (const auto& acc : w.accesses)
      key += fmt::format("|{}:{}:{}:{}:{}:{}", acc.operand, acc.sweep.start, acc.sweep.count, acc.sweep.stride,
                         acc.sweep.width, acc.write);
    if (auto done = stream_walks_->find(key)) return std::move(*done);
  }
  NodeEstimate n = base(node, model);
  CorePricer p(s_, a_);
  term(n, "{}", what);
  run_lines(p, s_, line_streams(p, w), kernel, unit_bytes, n, terms_);
  if (!kernel) p.add_scalar(n.flops, n, terms_);
  p.finish(n, terms_);
  if (!key.empty()) stream_walks_->put(key, n);
  return n;
}

}  // namespace bertlab::hw::estimate_detail

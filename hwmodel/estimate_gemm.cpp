// GEMM lowering of the estimate: each GEMM node as the work of its arrangement's schedule
// (work.h), its layout conversions as nodes of their own, its traffic (analytic.h) and its
// array cycles (the arrangement's gemm_compute, or SCALE-Sim's closed forms).
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "hwmodel/analytic.h"
#include "hwmodel/compute.h"
#include "hwmodel/estimate_detail.h"
#include "hwmodel/scalesim_memory.h"

namespace bertlab::hw::estimate_detail {

int64_t NodeModel::per_head_qkv(int qkv) {
  if (!core_ || s_.qkv != QkvSchedule::per_head) return 0;
  if (const auto it = qkv_heads_.find(qkv); it != qkv_heads_.end()) return it->second;
  int64_t heads = 0;
  for (const auto& n : g_.nodes())
    if ((n.kind == OpKind::attn_scores && n.inputs[0] == qkv) || (n.kind == OpKind::attn_context && n.inputs[1] == qkv))
      heads = n.attrs.at("heads").get<int64_t>();
  return qkv_heads_[qkv] = heads;
}

// The attention products of one forward node: QK^T per (batch, head), K^T converted into the
// B arrangement first; or PV per (batch, head), with TiC-SAT's head copy under per-head RWMA.
// Returns whether a conversion node precedes the GEMM.
bool NodeModel::lower_attention(const Node& node, GemmRole role, GemmWork& w, StreamWork& extra, std::string& lowering) {
  const int64_t S = s_.array.kernel;
  bool converted = false;
  const bool scores = role == GemmRole::scores;  // else the context
  const TensorDesc& qkv = g_.tensor(scores ? node.inputs[0] : node.inputs[1]);
  const int64_t B = qkv.shape[0], L = qkv.shape[1], H = qkv.shape[2] / 3;
  const int64_t heads = node.attrs.at("heads").get<int64_t>(), d = H / heads;
  const int qkv_id = scores ? node.inputs[0] : node.inputs[1];
  const MatrixView qkv_m = low_.matrix(qkv_id, 0);
  // Head h's Q, K or V (part 0, 1, 2) of batch b: in place in qkv, or its own buffer per head.
  const bool split = per_head_qkv(qkv_id) > 0;
  auto head = [&](int part, int64_t b, int64_t h) {
    return split ? sub_view(head_buffer(qkv_id, part, h, B * L, d), b * L, L, 0, d)
                 : sub_view(qkv_m, b * L, L, part * H + h * d, d);
  };
  if (scores) {
    // K^T: the B operand is K transposed. RWMA: a row-major copy (d x L per head);
    // BWMA: every S x S tile transposed in place of the panel order. Either way the K
    // third of qkv is read once and the copy written once.
    const std::string kt = node.name + "#k_transposed";
    for (int64_t b = 0; b < B; ++b)
      for (const auto& sw : block_sweeps(qkv_m, b * L, L, H, H)) extra_conv_.accesses.push_back({"k", sw, false});
    extra_conv_.accesses.push_back({"k_transposed", low_.whole(kt, B * heads * view_bytes(a_, d, L, s_.elem_bytes, S)), true});
    converted = true;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        const MatrixView kt_h = low_.fresh(kt, d, L, b * heads + h, B * heads);
        conv_pairs_.push_back({head(1, b, h), kt_h});
        w.instances.push_back({head(0, b, h), kt_h, low_.matrix(node.outputs[0], b * heads + h)});
      }
    extra.accesses.push_back({"mask_bias", low_.whole(g_.tensor(node.inputs[1]).name, B * L * s_.elem_bytes), false});
    lowering = fmt::format("{} products Q(L,d) K^T(d,L), L={}, d={}: Q read in place from qkv (head split "
                           "{}), K^T from the converted copy",
                           B * heads, L, d, arr().head_split);
  } else {
    const MatrixView ctx = low_.matrix(node.outputs[0], 0);
    // TiC-SAT per head under RWMA: each head's context (L,d) written head after head into one
    // buffer, then copied row by row into ctx (its multihead_transpose); under BWMA the
    // head-major buffer is ctx's own panels.
    const bool copy = split && !paper_bwma(a_, "TiC-SAT's per-head attention (qkv per_head)");
    const std::string heads_key = g_.tensor(node.outputs[0]).name + "#heads";
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < heads; ++h)
        w.instances.push_back({low_.matrix(node.inputs[0], b * heads + h), head(2, b, h),
                               copy ? low_.fresh(heads_key, L, d, b * heads + h, B * heads)
                                    : sub_view(ctx, b * L, L, h * d, d)});
    if (copy) {
      const int64_t bytes = B * L * H * s_.elem_bytes;
      head_copy_.accesses = {{"ctx_heads", low_.whole(heads_key, bytes), false},
                             {"ctx", low_.whole(g_.tensor(node.outputs[0]).name, bytes), true}};
    }
    lowering = copy ? fmt::format("{} products P(L,L) V(L,d): V from its buffer per head, the heads written one "
                                  "after another and copied into the rows of ctx (TiC-SAT's multihead_transpose)",
                                  B * heads)
                    : fmt::format("{} products P(L,L) V(L,d): V read in place from {} (already in the B "
                                  "arrangement), heads concatenated in place ({})",
                                  B * heads, split ? "its buffer per head" : "qkv", arr().head_concat);
  }
  return converted;
}

// The array-issue model of one lowered GEMM (systems without the core model): the conversion
// node when there is one, then the GEMM's traffic and its compute on the arrays (the
// arrangement's tile schedule, or SCALE-Sim's folds and memory stalls).
void NodeModel::array_gemm(const Node& node, const GemmShape& gm, GemmWork& w, StreamWork& extra, bool converted,
                           const std::string& lowering, std::vector<NodeEstimate>& out) {
  const int64_t S = s_.array.kernel;
  NodeEstimate conv = base(node, "convert");
  conv_pairs_.clear();
  if (converted) {
    conv.name = node.name + ".convert";
    conv.op = "convert";
    conv.flops = 0;
    conv.traffic = analytic_traffic(extra_conv_, s_, s_.cores);
    term(conv, "layout conversion for '{}' under {}: transposed operand read once and "
                                     "written once ({})",
                                     node.name, to_string(a_),
                                     arr().transpose);
    describe_traffic(conv, s_, terms_);
    finish_time(conv, s_, scalar_compute(0), terms_);
    out.push_back(conv);
    extra_conv_.accesses.clear();
  }

  NodeEstimate n = base(node, "gemm");
  n.traffic = analytic_traffic(w, s_, s_.cores);
  for (auto& acc : extra_stream_.accesses) extra.accesses.push_back(acc);
  extra_stream_.accesses.clear();
  n.traffic.add(analytic_traffic(extra, s_, s_.cores));
  // Compute: tiles per core under the schedule; each tile streams its rows (all M under
  // BWMA, one sequence block under RWMA) with 2S-1 rows of fill and drain.
  const int64_t KT = w.k / S, NT = w.n / S, P = s_.cores, inst = static_cast<int64_t>(w.instances.size());
  std::vector<double> per_core(P, 0);
  term(n, "{}: GEMM batch {} x (M {} x N {} x K {}), {} x {} tiles of {}x{} per product{}",
                                lowering, inst, gm.m, gm.n, gm.k, KT, NT, S, S,
                                (w.k != gm.k || w.n != gm.n) ? fmt::format(" (K, N padded to {}, {})", w.k, w.n) : "");
  if (s_.array.compute_model == ComputeModel::scalesim) {
    const auto sc = scalesim_gemm(S, S, gm.m, w.n, w.k, s_.array.dataflow);
    const auto cyc = scalesim_per_core(S, S, gm.m, w.n, w.k, s_.array.dataflow, inst, P);
    for (int64_t c = 0; c < P; ++c) per_core[c] = static_cast<double>(cyc[c]);
    n.tiles = sc.folds * inst;
    term(n, "compute (SCALE-Sim {}): {} folds, {} cycles per product as SCALE-Sim reports them (demand rows - 1); "
            "{} product(s) split over {} core(s), busiest {} cycles; SRAM reads A {} B {}, writes {} "
            "(SCALE-Sim reports {})",
         to_string(s_.array.dataflow), sc.folds, sc.cycles, inst, P, *std::max_element(cyc.begin(), cyc.end()),
         sc.ifmap_reads, sc.filter_reads, sc.ofmap_writes, sc.reported_ofmap_writes);
    if (const auto& mem = s_.array.scalesim_memory) {
      // SCALE-Sim's memory system (scalesim_memory.h) simulated for one product. Each core has
      // its own SRAMs and its own DRAM interface of the configured bandwidth; its share stalls
      // at the product's rate per demand row (exact for one core, where the share is whole
      // products, each a SCALE-Sim layer with fresh buffers).
      const auto ms = scalesim_memory_gemm(S, S, gm.m, w.n, w.k, s_.array.dataflow, *mem);
      const double stalls_per_row = static_cast<double>(ms.stall_cycles) / static_cast<double>(sc.rows);
      double busiest = 0;
      for (int64_t c = 0; c < P; ++c) {
        const double rows = cyc[c] > 0 ? static_cast<double>(cyc[c] + 1) : 0.0;
        const double stalls = std::round(stalls_per_row * rows);
        per_core[c] += stalls;
        busiest = std::max(busiest, stalls);
      }
      term(n, "SCALE-Sim memory ({} / {} / {} kB IFMAP / FILTER / OFMAP SRAM, {} words/cycle per buffer to DRAM{}): "
              "{} stall cycles per product, total {} = compute {} + stalls; DRAM reads A {} B {} words, "
              "writes {}; per core at the product's stalls per demand row, busiest core +{} cycles",
           mem->ifmap_sram_kb, mem->filter_sram_kb, mem->ofmap_sram_kb, mem->bandwidth_words_per_cycle,
           mem->stall_double_count ? ", lateness counted twice as before SCALE-Sim 22f88b17" : "", ms.stall_cycles,
           ms.total_cycles, ms.compute_cycles, ms.dram_ifmap_reads, ms.dram_filter_reads, ms.dram_ofmap_writes,
           busiest);
    }
  } else {
    arr().gemm_compute(w, gm, s_, per_core, n, terms_);
  }
  describe_traffic(n, s_, terms_);
  finish_time(n, s_, per_core, terms_);
  out.push_back(n);
}

void NodeModel::lower_gemm(const Node& node, const GemmShape& gm, std::vector<NodeEstimate>& out) {
  const int64_t S = s_.array.kernel;
  if (!s_.pad_to_kernel)
    check(gm.k % S == 0 && gm.n % S == 0,
          "node '{}': GEMM K = {} and N = {} must be multiples of the kernel size {} when "
          "'pad_to_kernel' is false",
          node.name, gm.k, gm.n, S);
  GemmWork w;
  w.arrangement = a_;
  w.S = S;
  w.m = gm.m;
  w.k = ceil_div(gm.k, S) * S;
  w.n = ceil_div(gm.n, S) * S;
  w.block_rows = s_.rwma_block_rows;
  StreamWork extra;
  bool converted = false;
  std::string lowering;
  if (gm.role == GemmRole::dense) {
    const MatrixView x = low_.matrix(node.inputs[0], 0);
    const std::string& wname = g_.tensor(node.inputs[1]).name;
    if (const int64_t heads = per_head_qkv(node.outputs[0]); heads > 0) {
      // TiC-SAT's attention projections: per head, Dense(H -> d) for Q, K and V, each weight
      // (H x d) and each output (M x d) an allocation of its own.
      const int64_t d = gm.n / 3 / heads;
      w.n = ceil_div(d, S) * S;
      for (int part = 0; part < 3; ++part)
        for (int64_t h = 0; h < heads; ++h)
          w.instances.push_back({x, low_.fresh(fmt::format("{}#packed{}.{}", wname, part, h), gm.k, d),
                                 head_buffer(node.outputs[0], part, h, gm.m, d)});
      lowering = fmt::format("x(M,K) times each of {} prepacked weights (K,{}) into buffers of their own (qkv per "
                             "head, as TiC-SAT runs it), bias in the epilogue",
                             3 * heads, d);
    } else {
      // Weights are prepacked offline into the B arrangement (K x N row-major, or S x S tiles).
      w.instances.push_back({x, low_.fresh(wname + "#packed", gm.k, gm.n), low_.matrix(node.outputs[0], 0)});
      lowering = "x(M,K) times the prepacked weight (K,N), bias (and residual) in the epilogue";
    }
    extra.accesses.push_back({"bias", low_.whole(g_.tensor(node.inputs[2]).name, gm.n * s_.elem_bytes), false});
    if (node.inputs.size() > 3)
      extra.accesses.push_back({"residual", low_.whole(g_.tensor(node.inputs[3]).name, low_.tensor_bytes(node.inputs[3])), false});
  } else if (gm.role == GemmRole::scores || gm.role == GemmRole::context) {
    converted = lower_attention(node, gm.role, w, extra, lowering);
  } else if (backward_gemm(node, gm, w, lowering)) {
    converted = !extra_conv_.accesses.empty();
  } else {
    // A GEMM kind this model does not know: fresh operand matrices
    // in the arrangement; a transposed activation operand is converted first.
    for (int64_t i = 0; i < gm.batch; ++i)
      w.instances.push_back({low_.fresh(node.name + "#a", gm.m, gm.k, i, gm.batch),
                             low_.fresh(node.name + "#b", gm.k, gm.n, i, gm.batch),
                             low_.fresh(node.name + "#y", gm.m, gm.n, i, gm.batch)});
    if (gm.trans_a || gm.trans_b) {
      const int64_t bytes = gm.batch * (gm.trans_a ? gm.m * gm.k : gm.k * gm.n) * s_.elem_bytes;
      extra_conv_.accesses.push_back({"src", low_.whole(node.name + "#src", bytes), false});
      extra_conv_.accesses.push_back({"dst", low_.whole(node.name + (gm.trans_a ? "#a" : "#b"), bytes), true});
      converted = true;
    }
    lowering = "generic GEMM from node_gemm(): operands as fresh matrices in the arrangement";
  }
  if (core_) {
    for (auto& acc : extra_stream_.accesses) extra.accesses.push_back(acc);
    extra_stream_.accesses.clear();
    if (!converted) conv_pairs_.clear();
    core_gemm(node, gm, w, extra, converted, lowering, out);
    return;
  }
  array_gemm(node, gm, w, extra, converted, lowering, out);
}

MatrixView NodeModel::transposed_a(const Node& node, const GemmShape& gm, const MatrixView& src, int64_t i) {
  switch (arr().transposed_operand) {
    case TransposedOperand::tiles_in_array: return low_.fresh(node.name + "#a_tiles", gm.m, gm.k, i, gm.batch);
    case TransposedOperand::converted_copy: break;
  }
  for (const auto& sw : block_sweeps(src, 0, src.rows, 0, src.cols)) extra_conv_.accesses.push_back({"a_src", sw, false});
  const MatrixView t = low_.fresh(node.name + "#a_t", gm.m, gm.k, i, gm.batch, true);
  conv_pairs_.push_back({src, t});
  extra_conv_.accesses.push_back({"a_transposed", Sweep{t.base, 1, gm.m * gm.k * s_.elem_bytes, gm.m * gm.k * s_.elem_bytes}, true});
  return t;
}

bool NodeModel::backward_gemm(const Node& node, const GemmShape& gm, GemmWork& w, std::string& lowering) {
  switch (gm.role) {
    case GemmRole::dense_grad_input: {  // dx(M,K) = dy(M,N) w(N,K)
      // The weight's forward packing read tile by tile in transposed order, each S x S
      // tile transposed as it is loaded: the same bytes per tile as the forward GEMM.
      const TensorDesc& wt = g_.tensor(node.inputs[1]);
      w.instances.push_back({low_.matrix(node.inputs[0], 0), low_.fresh(wt.name + "#packed", gm.k, gm.n),
                             low_.matrix(node.outputs[0], 0)});
      lowering = "dx(M,K) = dy(M,N) w(N,K): dy streamed as the A operand, the packed weight's tiles loaded transposed";
      return true;
    }
    case GemmRole::dense_grad_weight: {  // dw(N,K) = dy^T(N,M) x(M,K)
      const MatrixView dy = low_.matrix(node.inputs[0], 0);
      w.instances.push_back({transposed_a(node, gm, dy, 0), low_.matrix(node.inputs[1], 0),
                             low_.matrix(node.outputs[0], 0)});
      extra_stream_.accesses.push_back({"db", low_.whole(g_.tensor(node.outputs[1]).name, gm.m * s_.elem_bytes), true});
      lowering = fmt::format("dw(N,K) = dy^T(N,M) x(M,K): x read in place (already the B arrangement); dy^T {}",
                             arr().transposed_dy);
      return true;
    }
    case GemmRole::scores_grad_q:        // dQ = dS K
    case GemmRole::scores_grad_k:        // dK = dS^T Q
    case GemmRole::context_grad_v:       // dV = P^T dctx
    case GemmRole::context_grad_probs: {  // dP = dctx V^T
      const int64_t heads = node.attrs.at("heads").get<int64_t>();
      const int qkv_or_ctx = node.inputs[1];
      const bool probs = gm.role == GemmRole::context_grad_probs, dv = gm.role == GemmRole::context_grad_v;
      const TensorDesc& seqt = g_.tensor(dv ? node.inputs[0] : node.inputs[1]);
      const int64_t B = seqt.shape[0], L = seqt.shape[1], H = dv ? seqt.shape[2] : seqt.shape[2] / 3, d = H / heads;
      const MatrixView out = low_.matrix(node.outputs[0], 0);
      if (probs) {
        // V^T for dP: converted like K^T in the forward scores (RWMA transpose, BWMA tiles).
        const MatrixView qkv = low_.matrix(qkv_or_ctx, 0);
        for (int64_t b = 0; b < B; ++b)
          for (const auto& sw : block_sweeps(qkv, b * L, L, 2 * H, H)) extra_conv_.accesses.push_back({"v", sw, false});
        extra_conv_.accesses.push_back({"v_transposed", low_.whole(node.name + "#v_t", B * heads * view_bytes(a_, d, L, s_.elem_bytes, S_())), true});
        const MatrixView dctx = low_.matrix(node.inputs[0], 0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < heads; ++h) {
            const MatrixView vt = low_.fresh(node.name + "#v_t", d, L, b * heads + h, B * heads);
            conv_pairs_.push_back({sub_view(qkv, b * L, L, 2 * H + h * d, d), vt});
            w.instances.push_back({sub_view(dctx, b * L, L, h * d, d), vt, low_.matrix(node.outputs[0], b * heads + h)});
          }
        lowering = "dP = dctx V^T per head: dctx read in place, V^T from a converted copy";
        return true;
      }
      const int scores = dv ? node.inputs[1] : node.inputs[0];
      const MatrixView seq = low_.matrix(dv ? node.inputs[0] : node.inputs[1], 0);
      const int64_t b_col = gm.role == GemmRole::scores_grad_q ? H : 0;  // K for dQ, Q for dK
      const int64_t y_col = gm.role == GemmRole::scores_grad_q ? 0 : gm.role == GemmRole::scores_grad_k ? H : 2 * H;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t i = b * heads + h;
          const MatrixView sc = low_.matrix(scores, i);
          const MatrixView a = gm.role == GemmRole::scores_grad_q ? sc : transposed_a(node, gm, sc, i);
          w.instances.push_back({a, sub_view(seq, b * L, L, b_col + h * d, d), sub_view(out, b * L, L, y_col + h * d, d)});
        }
      lowering = fmt::format("{} products per head, the (L,d) operand read in place from {} ({}), the result "
                             "written into its third of dqkv; {}",
                             B * heads, dv ? "dctx" : "qkv", arr().head_operand,
                             gm.role == GemmRole::scores_grad_q ? "dS streamed as A"
                                                                      : arr().transposed_ll);
      return true;
    }
    case GemmRole::dense:
    case GemmRole::scores:
    case GemmRole::context: return false;
  }
  return false;
}

}  // namespace bertlab::hw::estimate_detail

#include "hwmodel/estimate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "hwmodel/analytic.h"
#include "hwmodel/compute.h"
#include "base/error.h"

namespace bertlab::hw {

double GraphEstimate::seconds() const {
  double t = 0;
  for (const auto& n : nodes) t += n.seconds;
  return t;
}
int64_t GraphEstimate::dram_bytes() const {
  int64_t b = 0;
  for (const auto& n : nodes) b += n.traffic.dram_bytes();
  return b;
}
double GraphEstimate::seconds_in(const std::string& r) const {
  double t = 0;
  for (const auto& n : nodes)
    if (n.region == r) t += n.seconds;
  return t;
}
int64_t GraphEstimate::dram_bytes_in(const std::string& r) const {
  int64_t b = 0;
  for (const auto& n : nodes)
    if (n.region == r) b += n.traffic.dram_bytes();
  return b;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A tensor as a stack of matrices: rank >= 4 (attention scores) stacks batch x heads
// matrices of the last two dims; otherwise the leading dims fold into rows.
struct Mats {
  int64_t batch = 1, rows = 1, cols = 1;
};
Mats mats_of(const TensorDesc& t) {
  Mats m;
  const auto& s = t.shape;
  if (s.empty()) return m;
  m.cols = s.back();
  if (s.size() >= 4) {
    m.rows = s[s.size() - 2];
    for (size_t i = 0; i + 2 < s.size(); ++i) m.batch *= s[i];
  } else {
    m.rows = t.numel() / m.cols;
  }
  return m;
}

// The builder's "region" attribute of the node (attention | ffn), "other" without one.
std::string region_of(const Node& node) {
  auto it = node.attrs.find("region");
  return it != node.attrs.end() && it->is_string() ? it->get<std::string>() : "other";
}

class Lowering {
 public:
  Lowering(const Graph& g, const SystemDesc& s, Arrangement a) : g_(g), s_(s), a_(a) {
    S_ = s.array.kernel;
    e_ = s.elem_bytes;
  }

  // Each tensor placed once, aligned to a DRAM row (addresses are only used for line and
  // row arithmetic, so a simple bump allocator is enough).
  uint64_t place(const std::string& key, int64_t bytes) {
    auto it = base_.find(key);
    if (it != base_.end()) return it->second;
    const uint64_t b = next_;
    const int64_t row = s_.dram.row_bytes;
    next_ += static_cast<uint64_t>(ceil_div(std::max<int64_t>(bytes, 1), row) * row);
    base_[key] = b;
    return b;
  }
  MatrixView matrix(int tensor, int64_t index) {
    const TensorDesc& t = g_.tensor(tensor);
    const Mats m = mats_of(t);
    const int64_t bytes = view_bytes(a_, m.rows, m.cols, e_, S_);
    const uint64_t base = place(t.name, bytes * m.batch);
    return make_view(a_, base + index * bytes, m.rows, m.cols, e_, S_);
  }
  MatrixView fresh(const std::string& key, int64_t rows, int64_t cols, int64_t index = 0,
                   int64_t batch = 1, bool row_major = false) {
    const Arrangement arr = row_major ? Arrangement::rwma : a_;
    const int64_t bytes = view_bytes(arr, rows, cols, e_, S_);
    return make_view(arr, place(key, bytes * batch) + index * bytes, rows, cols, e_, S_);
  }
  Sweep whole(const std::string& key, int64_t bytes) {
    return {place(key, bytes), 1, bytes, bytes};
  }
  int64_t tensor_bytes(int t) {
    const Mats m = mats_of(g_.tensor(t));
    return m.batch * view_bytes(a_, m.rows, m.cols, e_, S_);
  }

  void reset() {
    next_ = 1 << 20;
    base_.clear();
  }

  const Graph& g_;
  const SystemDesc& s_;
  Arrangement a_;
  int64_t S_, e_;
  uint64_t next_ = 1 << 20;
  std::map<std::string, uint64_t> base_;
};

// One term of the estimate in words (--explain); formatted only when asked for.
template <class... Args>
void term_if(bool on, NodeEstimate& n, fmt::format_string<Args...> f, Args&&... args) {
  if (on) n.terms.push_back(fmt::format(f, std::forward<Args>(args)...));
}

double dram_latency_cycles(const SystemDesc& s, const Traffic& t) {
  const double lines = std::max<int64_t>(1, t.read_lines() + t.write_lines());
  const double ns = (t.row_hits() * s.dram.row_hit_ns + t.row_misses() * s.dram.row_miss_ns) / lines;
  return ns * s.clock_ghz;
}

// Time from compute, memory stalls and their overlap on the busiest core, and the DRAM
// bandwidth all cores share.
void finish_time(NodeEstimate& n, const SystemDesc& s, const std::vector<double>& compute_per_core, bool terms) {
  const int64_t P = s.cores;
  const double lat = dram_latency_cycles(s, n.traffic);
  double busiest = 0;
  for (int64_t c = 0; c < P; ++c) {
    const double comp = c < (int64_t)compute_per_core.size() ? compute_per_core[c] : 0;
    const double l1 = c < (int64_t)n.traffic.l1_misses.size() ? n.traffic.l1_misses[c] : 0;
    const double llc = c < (int64_t)n.traffic.llc_misses.size() ? n.traffic.llc_misses[c] : 0;
    // Stalls of a core: every L1 miss waits for the LLC, every LLC miss for DRAM, with
    // memory_parallelism misses outstanding at once.
    const double mem = (l1 * s.llc.hit_cycles + llc * lat) / s.memory_parallelism;
    const double t = std::max(comp, mem) + (1 - s.overlap) * std::min(comp, mem);
    if (t >= busiest) {
      busiest = t;
      n.compute_cycles = comp;
      n.memory_cycles = mem;
    }
  }
  n.dram_cycles = n.traffic.dram_bytes() / s.dram_bytes_per_cycle();
  n.cycles = std::max(busiest, n.dram_cycles);
  n.seconds = n.cycles / (s.clock_ghz * 1e9);
  term_if(terms, n, 
      "time: busiest core {:.0f} cycles = max(compute {:.0f}, memory stalls {:.0f}) + {:.0f}% of the "
      "smaller (overlap {}); DRAM bandwidth floor {:.0f} cycles ({} bytes at {} GB/s shared by {} "
      "core(s)); node {:.0f} cycles = {:.3f} us",
      busiest, n.compute_cycles, n.memory_cycles, 100 * (1 - s.overlap), s.overlap, n.dram_cycles,
      n.traffic.dram_bytes(), s.dram.peak_gbps, P, n.cycles, n.seconds * 1e6);
}

void describe_traffic(NodeEstimate& n, const SystemDesc& s, bool terms) {
  if (!terms) return;
  const Traffic& t = n.traffic;
  for (const auto& [name, o] : t.operands)
    term_if(terms, n, 
        "operand {}: {} DRAM line reads, {} line writes, {} row-buffer misses; fetched {}x: {}", name,
        o.read_lines, o.write_lines, o.row_misses, o.refetch, o.why);
  term_if(terms, n, 
      "off-chip: {} bytes = {} lines of {} B = {} bursts of {} B; row buffer: {} hits, {} misses "
      "(rows of {} B)",
      t.dram_bytes(), t.read_lines() + t.write_lines(), t.line_bytes, t.bursts(), t.burst_bytes,
      t.row_hits(), t.row_misses(), s.dram.row_bytes);
}

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

// What the cpu model needs to know about the whole graph.
struct CpuGraphFacts {
  bool training = false;  // any backward node: weights are packed before every linear GEMM
};

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
  n.flops = node_flops(g, node);
  const double bytes = static_cast<double>(node_min_bytes(g, node));
  const bool resident = s.resident_gbps > 0 && node.phase == Phase::forward && bytes <= s.llc.size_bytes;
  const double gbps = resident ? s.resident_gbps : s.dram.peak_gbps;
  const char* where = resident ? "cache-resident triad" : "DRAM triad";
  const double region = s.parallel_region_seconds;
  const auto gemm = node.category == Category::gemm ? node_gemm(g, node) : std::nullopt;
  if (!gemm) {
    // Scalar work at the f32 GEMM peak is only a floor: these nodes are memory-bound.
    const double peak = s.gemm_peak_gflops.at("f32").get<double>() * 1e9;
    auto in_bytes = [&](size_t i) { return static_cast<double>(g.tensor(node.inputs.at(i)).bytes()); };
    double rereads = 0;
    switch (op_info(node.kind).family) {
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
    const double reread_gbps = s.resident_gbps > 0 ? s.resident_gbps : s.dram.peak_gbps;
    const double t_comp = n.flops / peak, t_mem = bytes / (gbps * 1e9) + rereads / (reread_gbps * 1e9);
    n.seconds = region + std::max(t_comp, t_mem);
    term_if(terms, n,
            "{} parallel region {:.2f} us + max(FLOPs {:.3g} / f32 peak {:.4g} GFLOP/s, bytes {:.3g} / {} {:.4g} GB/s "
            "+ row re-reads {:.3g} / {:.4g} GB/s) = {:.3f} us",
            to_string(node.kind), region * 1e6, n.flops, peak / 1e9, bytes, where, gbps, rereads, reread_gbps,
            n.seconds * 1e6);
    n.cycles = n.seconds * s.clock_ghz * 1e9;
    return n;
  }
  const Precision prec_type = gemm_precision(node);
  const char* prec = file_key(prec_type);
  check(s.gemm_peak_gflops.contains(prec) && s.gemm_peak_gflops.at(prec).is_number(),
        "node '{}' is a {} GEMM, but system '{}' has no field 'gemm_peak_gflops.{}' (calibrate on a CPU with native "
        "bf16 matmul, or estimate the fp32 graph)",
        node.name, prec, s.name, prec);
  const GemmCalibration* near = nearest_measured_gemm(s, *gemm, prec_type);
  const double rate = (near ? near->gflops : s.gemm_peak_gflops.at(prec).get<double>()) * 1e9;
  // Operand elements of the product: A (batch x m x k) and B (k x n, per product unless a
  // linear layer's shared weight).
  const double a_elems = static_cast<double>(gemm->batch) * gemm->m * gemm->k;
  const double b_elems = static_cast<double>(node.kind == OpKind::linear ? 1 : gemm->batch) * gemm->k * gemm->n;
  // Reorders the executor runs in the node besides the matmul (ops/bf16.h, ops/matmul.h):
  // bf16 rounds each f32 operand into a dense bf16 copy (read 4 B, write 2 B per element),
  // except an inference weight, packed in bf16 once at load time; training packs each linear
  // weight before its GEMM (read 4 B, write the packed 4 B f32 or 2 B bf16), which in bf16 is
  // that operand's conversion. The tied MLM decoder (> 32 MB) is read unpacked instead.
  const bool bf16 = prec_type == Precision::bf16;
  const double e_gemm = bf16 ? 2 : 4;
  double convert_bytes = 0;
  int calls = 1;  // the matmul
  const bool linear_weight_packed = node.kind == OpKind::linear && facts.training && b_elems * 4 <= double(32 << 20);
  if (bf16) {
    convert_bytes += a_elems * (4 + e_gemm), ++calls;
    if (node.kind != OpKind::linear || facts.training) convert_bytes += b_elems * (4 + e_gemm), ++calls;
  } else if (linear_weight_packed) {
    convert_bytes += b_elems * (4 + e_gemm), ++calls;
  }
  // The bias gradient of linear_grad_weight: a second pass over dy (its column sums) in its
  // own parallel region.
  if (node.kind == OpKind::linear_grad_weight) {
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

class NodeModel {
 public:
  NodeModel(const Graph& g, const SystemDesc& s, Arrangement a) : g_(g), s_(s), a_(a), low_(g, s, a) {}

  // `terms`: also write the estimate in words (slow: formatting); off in sweeps.
  std::vector<NodeEstimate> run(const Node& node, bool terms) {
    terms_ = terms;
    low_.reset();  // operands placed per node: the estimate depends on shapes only
    std::vector<NodeEstimate> out;
    const auto gemm = node_gemm(g_, node);
    if (node.category == Category::gemm && gemm) {
      lower_gemm(node, *gemm, out);
    } else {
      switch (op_info(node.kind).family) {
        case HwFamily::softmax: out.push_back(rows(node, {node.inputs[0]}, 3)); break;
        case HwFamily::layernorm: out.push_back(rows(node, {node.inputs[0]}, 2, {node.inputs[1], node.inputs[2]})); break;
        // dx = y * (dy - sum(dy * y)): one pass for the row sum, one for dx.
        case HwFamily::softmax_grad: out.push_back(rows(node, {node.inputs[0], node.inputs[1]}, 2)); break;
        // Recompute mean and rstd (x), the two row sums (dy, x), then dx: three passes over
        // the row; gamma read and dgamma, dbeta accumulated as vectors.
        case HwFamily::layernorm_grad:
          out.push_back(rows(node, {node.inputs[0], node.inputs[1]}, 3, {node.inputs[2]}, {node.outputs[1], node.outputs[2]}));
          break;
        case HwFamily::stream: out.push_back(elementwise(node)); break;
        case HwFamily::embedding: out.push_back(embedding(node)); break;
        case HwFamily::embedding_grad: out.push_back(embedding_grad(node)); break;
        case HwFamily::update: out.push_back(optimizer(node)); break;
        case HwFamily::gemm:  // a GEMM-family node without a GEMM shape
        case HwFamily::generic: out.push_back(fallback(node)); break;
      }
    }
    for (auto& n : out) {
      n.region = region_of(node);
      n.phase = to_string(node.phase);
    }
    return out;
  }

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

  void lower_gemm(const Node& node, const GemmShape& gm, std::vector<NodeEstimate>& out) {
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
    NodeEstimate conv = base(node, "convert");
    bool converted = false;
    std::string lowering;
    if (node.kind == OpKind::linear) {
      const TensorDesc& wt = g_.tensor(node.inputs[1]);
      // Weights are prepacked offline into the B arrangement (K x N row-major, or S x S tiles).
      w.instances.push_back({low_.matrix(node.inputs[0], 0), low_.fresh(wt.name + "#packed", gm.k, gm.n),
                             low_.matrix(node.outputs[0], 0)});
      extra.accesses.push_back({"bias", low_.whole(g_.tensor(node.inputs[2]).name, gm.n * s_.elem_bytes), false});
      if (node.inputs.size() > 3)
        extra.accesses.push_back({"residual", low_.whole(g_.tensor(node.inputs[3]).name, low_.tensor_bytes(node.inputs[3])), false});
      lowering = "x(M,K) times the prepacked weight (K,N), bias (and residual) in the epilogue";
    } else if (node.kind == OpKind::attn_scores || node.kind == OpKind::attn_context) {
      const TensorDesc& qkv = g_.tensor(node.kind == OpKind::attn_scores ? node.inputs[0] : node.inputs[1]);
      const int64_t B = qkv.shape[0], L = qkv.shape[1], H = qkv.shape[2] / 3;
      const int64_t heads = node.attrs.at("heads").get<int64_t>(), d = H / heads;
      const int qkv_id = node.kind == OpKind::attn_scores ? node.inputs[0] : node.inputs[1];
      const MatrixView qkv_m = low_.matrix(qkv_id, 0);
      if (node.kind == OpKind::attn_scores) {
        // K^T: the B operand is K transposed. RWMA: a row-major copy (d x L per head);
        // BWMA: every S x S tile transposed in place of the panel order. Either way the K
        // third of qkv is read once and the copy written once.
        const std::string kt = node.name + "#k_transposed";
        for (int64_t b = 0; b < B; ++b)
          for (const auto& sw : block_sweeps(qkv_m, b * L, L, H, H)) extra_conv_.accesses.push_back({"k", sw, false});
        extra_conv_.accesses.push_back({"k_transposed", low_.whole(kt, B * heads * view_bytes(a_, d, L, s_.elem_bytes, S)), true});
        converted = true;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < heads; ++h)
            w.instances.push_back({sub_view(qkv_m, b * L, L, h * d, d),
                                   low_.fresh(kt, d, L, b * heads + h, B * heads),
                                   low_.matrix(node.outputs[0], b * heads + h)});
        extra.accesses.push_back({"mask_bias", low_.whole(g_.tensor(node.inputs[1]).name, B * L * s_.elem_bytes), false});
        lowering = fmt::format("{} products Q(L,d) K^T(d,L), L={}, d={}: Q read in place from qkv (head split "
                               "{}), K^T from the converted copy",
                               B * heads, L, d, a_ == Arrangement::bwma ? "free: a head owns its panels" : "by strided rows");
      } else {
        const MatrixView ctx = low_.matrix(node.outputs[0], 0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < heads; ++h)
            w.instances.push_back({low_.matrix(node.inputs[0], b * heads + h),
                                   sub_view(qkv_m, b * L, L, 2 * H + h * d, d),
                                   sub_view(ctx, b * L, L, h * d, d)});
        lowering = fmt::format("{} products P(L,L) V(L,d): V read in place from qkv (already in the B "
                               "arrangement), heads concatenated in place ({})",
                               B * heads, a_ == Arrangement::bwma ? "free: panels" : "strided rows");
      }
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
    if (converted) {
      conv.name = node.name + ".convert";
      conv.op = "convert";
      conv.flops = 0;
      conv.traffic = analytic_traffic(extra_conv_, s_, s_.cores);
      term(conv, "layout conversion for '{}' under {}: transposed operand read once and "
                                       "written once ({})",
                                       node.name, to_string(a_),
                                       a_ == Arrangement::bwma ? "S x S tiles moved whole" : "row-major transpose");
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
    } else if (a_ == Arrangement::bwma) {
      const TileCost tc = tile_cost(s_, gm.m);
      // Products with fewer output panels than cores run several at once on groups of
      // cores (work.h bwma_groups): product i on group i mod groups.
      const BwmaGroups grp = bwma_groups(w, P);
      for (int64_t i = 0; i < inst; ++i)
        for (int64_t c = 0; c < grp.cores; ++c) {
          const int64_t panels = NT / grp.cores + (c < NT % grp.cores ? 1 : 0);
          per_core[grp.first_core(i) + c] += panels * KT * tc.cycles(s_.array);
        }
      n.tiles = inst * NT * KT;
      n.issues = static_cast<int64_t>(n.tiles * (tc.weight_issues + tc.stream_issues + tc.output_issues));
      term(n,
          "compute: output panels split over {} core(s){}; per tile {:.0f} weight issues + {:.0f} stream issues "
          "({} rows + {} fill/drain) + {:.0f} output issues",
          P,
          grp.groups > 1 ? fmt::format(" ({} products at a time, {} panel(s) each on {} core(s))", grp.groups, NT, grp.cores)
                         : std::string(),
          tc.weight_issues, tc.stream_issues, gm.m, 2 * S - 1, tc.output_issues);
    } else {
      const int64_t Mb = w.block_rows, MB = ceil_div(gm.m, Mb);
      for (int64_t blk = 0; blk < MB; ++blk) {
        const TileCost tc = tile_cost(s_, std::min(Mb, gm.m - blk * Mb));
        per_core[blk % P] += inst * NT * KT * tc.cycles(s_.array);
        n.issues += static_cast<int64_t>(inst * NT * KT * (tc.weight_issues + tc.stream_issues + tc.output_issues));
      }
      n.tiles = inst * NT * KT * MB;
      term(n, 
          "compute: {} sequence block(s) of {} rows split over {} core(s); every block reloads all {} "
          "weight tiles and pays {} rows of fill/drain per tile",
          MB, Mb, P, NT * KT, 2 * S - 1);
    }
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, per_core, terms_);
    out.push_back(n);
  }


  // The A operand of product i when it is the transpose of a stored activation `src`
  // (dY^T for dW, dS^T for dK, P^T for dV).
  // RWMA: a row-major transpose first (a conversion node reads src once and writes the
  //   transposed copy once), then the GEMM streams rows of the copy.
  // BWMA: no conversion: A's panel kb is the row of S x S tiles of src at rows kb*S..; each
  //   tile is read whole and fed to the array transposed, so A streams the same lines as a
  //   panel of a matrix stored in the B arrangement (stand-in: a matrix of A's extent).
  MatrixView transposed_a(const Node& node, const GemmShape& gm, const MatrixView& src, int64_t i) {
    if (a_ == Arrangement::bwma) return low_.fresh(node.name + "#a_tiles", gm.m, gm.k, i, gm.batch);
    for (const auto& sw : block_sweeps(src, 0, src.rows, 0, src.cols)) extra_conv_.accesses.push_back({"a_src", sw, false});
    const MatrixView t = low_.fresh(node.name + "#a_t", gm.m, gm.k, i, gm.batch, true);
    extra_conv_.accesses.push_back({"a_transposed", Sweep{t.base, 1, gm.m * gm.k * s_.elem_bytes, gm.m * gm.k * s_.elem_bytes}, true});
    return t;
  }

  // Backward GEMMs of the training graph: operands read in place where their storage is
  // already the arrangement the schedule needs, transposed operands as transposed_a().
  bool backward_gemm(const Node& node, const GemmShape& gm, GemmWork& w, std::string& lowering) {
    const bool bw = a_ == Arrangement::bwma;
    switch (node.kind) {
      case OpKind::linear_grad_input: {  // dx(M,K) = dy(M,N) w(N,K)
        // The weight's forward packing read tile by tile in transposed order, each S x S
        // tile transposed as it is loaded: the same bytes per tile as the forward GEMM.
        const TensorDesc& wt = g_.tensor(node.inputs[1]);
        w.instances.push_back({low_.matrix(node.inputs[0], 0), low_.fresh(wt.name + "#packed", gm.k, gm.n),
                               low_.matrix(node.outputs[0], 0)});
        lowering = "dx(M,K) = dy(M,N) w(N,K): dy streamed as the A operand, the packed weight's tiles loaded transposed";
        return true;
      }
      case OpKind::linear_grad_weight: {  // dw(N,K) = dy^T(N,M) x(M,K)
        const MatrixView dy = low_.matrix(node.inputs[0], 0);
        w.instances.push_back({transposed_a(node, gm, dy, 0), low_.matrix(node.inputs[1], 0),
                               low_.matrix(node.outputs[0], 0)});
        extra_stream_.accesses.push_back({"db", low_.whole(g_.tensor(node.outputs[1]).name, gm.m * s_.elem_bytes), true});
        lowering = fmt::format("dw(N,K) = dy^T(N,M) x(M,K): x read in place (already the B arrangement); dy^T {}",
                               bw ? "read as S x S tiles of dy's panels, transposed on the way into the array"
                                  : "from a row-major transposed copy (conversion node)");
        return true;
      }
      case OpKind::attn_scores_grad_q:   // dQ = dS K
      case OpKind::attn_scores_grad_k:   // dK = dS^T Q
      case OpKind::attn_context_grad_v:  // dV = P^T dctx
      case OpKind::attn_context_grad_probs: {  // dP = dctx V^T
        const int64_t heads = node.attrs.at("heads").get<int64_t>();
        const int qkv_or_ctx = node.inputs[1];
        const bool probs = node.kind == OpKind::attn_context_grad_probs, dv = node.kind == OpKind::attn_context_grad_v;
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
            for (int64_t h = 0; h < heads; ++h)
              w.instances.push_back({sub_view(dctx, b * L, L, h * d, d), low_.fresh(node.name + "#v_t", d, L, b * heads + h, B * heads),
                                     low_.matrix(node.outputs[0], b * heads + h)});
          lowering = "dP = dctx V^T per head: dctx read in place, V^T from a converted copy";
          return true;
        }
        const int scores = dv ? node.inputs[1] : node.inputs[0];
        const MatrixView seq = low_.matrix(dv ? node.inputs[0] : node.inputs[1], 0);
        const int64_t b_col = node.kind == OpKind::attn_scores_grad_q ? H : 0;  // K for dQ, Q for dK
        const int64_t y_col = node.kind == OpKind::attn_scores_grad_q ? 0 : node.kind == OpKind::attn_scores_grad_k ? H : 2 * H;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t i = b * heads + h;
            const MatrixView sc = low_.matrix(scores, i);
            const MatrixView a = node.kind == OpKind::attn_scores_grad_q ? sc : transposed_a(node, gm, sc, i);
            w.instances.push_back({a, sub_view(seq, b * L, L, b_col + h * d, d), sub_view(out, b * L, L, y_col + h * d, d)});
          }
        lowering = fmt::format("{} products per head, the (L,d) operand read in place from {} ({}), the result "
                               "written into its third of dqkv; {}",
                               B * heads, dv ? "dctx" : "qkv", bw ? "a head owns its panels" : "strided rows",
                               node.kind == OpKind::attn_scores_grad_q ? "dS streamed as A"
                               : bw ? "the (L,L) operand transposed tile by tile"
                                    : "the (L,L) operand transposed into a row-major copy first");
        return true;
      }
      case OpKind::embedding:
      case OpKind::mask_bias:
      case OpKind::linear:
      case OpKind::attn_scores:
      case OpKind::softmax:
      case OpKind::attn_context:
      case OpKind::add:
      case OpKind::layernorm:
      case OpKind::activation:
      case OpKind::first_token:
      case OpKind::dropout:
      case OpKind::gather_rows:
      case OpKind::cross_entropy:
      case OpKind::cross_entropy_grad:
      case OpKind::softmax_grad:
      case OpKind::layernorm_grad:
      case OpKind::activation_grad:
      case OpKind::dropout_grad:
      case OpKind::embedding_grad:
      case OpKind::gather_rows_grad:
      case OpKind::first_token_grad:
      case OpKind::grad_norm:
      case OpKind::adamw_update:
      case OpKind::lamb_update:
      case OpKind::allreduce: return false;
    }
    return false;
  }

  NodeEstimate rows(const Node& node, std::vector<int> ins, int passes, std::vector<int> vectors = {},
                    std::vector<int> vector_outputs = {}) {
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
    n.traffic = analytic_traffic(w, s_, s_.cores);
    StreamWork v;
    for (int t : vectors) v.accesses.push_back({g_.tensor(t).name, low_.whole(g_.tensor(t).name, g_.tensor(t).numel() * s_.elem_bytes), false});
    for (int t : vector_outputs) v.accesses.push_back({g_.tensor(t).name, low_.whole(g_.tensor(t).name, g_.tensor(t).numel() * s_.elem_bytes), true});
    n.traffic.add(analytic_traffic(v, s_, s_.cores));
    term(n, "row op over {} matrix(es) of {} rows x {} ({} pass(es) over each row): {}",
                                  m.batch, m.rows, m.cols, passes,
                                  a_ == Arrangement::bwma ? "each row gathered from its column panels (strided)"
                                                          : "each row contiguous");
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  NodeEstimate elementwise(const Node& node) {
    NodeEstimate n = base(node, "stream");
    StreamWork w;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int t = node.inputs[i];
      w.accesses.push_back({fmt::format("in{}", i), low_.whole(g_.tensor(t).name, low_.tensor_bytes(t)), false});
    }
    w.accesses.push_back({"out", low_.whole(g_.tensor(node.outputs[0]).name, low_.tensor_bytes(node.outputs[0])), true});
    n.traffic = analytic_traffic(w, s_, s_.cores);
    term(n, "{}", "elementwise: layout-independent, every operand streamed once in storage order");
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  // Embedding backward: each token's gradient row (in the arrangement: gathered from the
  // panels under BWMA) is added into one row of each table (row-major tables,
  // read-modify-write of a contiguous row); the ids are streamed.
  NodeEstimate embedding_grad(const Node& node) {
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
    n.traffic = analytic_traffic(w, s_, s_.cores);
    StreamWork other;
    const int64_t rows_bytes = m.rows * m.cols * s_.elem_bytes;
    for (const char* t : {"position_rows", "type_rows"}) {
      other.accesses.push_back({t, low_.whole(node.name + "#" + t, rows_bytes), false});
      other.accesses.push_back({t, low_.whole(node.name + "#" + t, rows_bytes), true});
    }
    for (int i = 1; i < 3; ++i)
      other.accesses.push_back({fmt::format("ids{}", i), low_.whole(g_.tensor(node.inputs[i]).name, g_.tensor(node.inputs[i]).numel() * 4), false});
    n.traffic.add(analytic_traffic(other, s_, s_.cores));
    term(n, "embedding backward: {} gradient rows {} added into a row of each row-major table", m.rows,
         a_ == Arrangement::bwma ? "gathered from the column panels" : "read contiguously");
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  // Optimizer (AdamW, LAMB), the gradient norm and the data-parallel gradient allreduce: pure
  // streams over the fp32 master parameters, gradients and moments (their graph dtypes,
  // whatever the accelerator's element size); layout-independent. A tensor updated in place
  // (parameter, moments; every gradient of the allreduce) is one read-modify-write stream:
  // each line fetched once and written back once. Read-only inputs are read once. For the
  // allreduce this is its local memory traffic only: the interconnect is not modelled.
  NodeEstimate optimizer(const Node& node) {
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
    n.traffic = analytic_traffic(w, s_, s_.cores);
    term(n, "{}: every operand streamed once in storage order at its graph dtype (fp32 state), updated tensors read-modify-written{}", n.op,
         node.kind == OpKind::allreduce ? "; local traffic only, the interconnect is not modelled" : "");
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  NodeEstimate embedding(const Node& node) {
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
    n.traffic = analytic_traffic(w, s_, s_.cores);
    StreamWork ids;
    for (int i = 0; i < 2; ++i)
      ids.accesses.push_back({fmt::format("ids{}", i), low_.whole(g_.tensor(node.inputs[i]).name, g_.tensor(node.inputs[i]).numel() * 4), false});
    n.traffic.add(analytic_traffic(ids, s_, s_.cores));
    term(n, "embedding: {} tokens gather a row of each table (row-major) and write the sum {}",
                                  m.rows, a_ == Arrangement::bwma ? "scattered into the column panels" : "as a contiguous row");
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  // Kinds this model does not know: every input read once and every output written once
  // (node_min_bytes), rescaled from the graph's dtypes to the system's element size.
  NodeEstimate fallback(const Node& node) {
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
    n.traffic = analytic_traffic(w, s_, s_.cores);
    term(n, 
        "fallback: no specific model for op '{}', generic streaming model: node_min_bytes {} x element size "
        "{} / graph dtype = {} bytes, outputs {} bytes",
        n.op, min_bytes, s_.elem_bytes, total, write);
    describe_traffic(n, s_, terms_);
    finish_time(n, s_, scalar_compute(n.flops), terms_);
    return n;
  }

  const Graph& g_;
  const SystemDesc& s_;
  Arrangement a_;
  Lowering low_;
  int64_t S_() const { return s_.array.kernel; }

  StreamWork extra_conv_, extra_stream_;
  bool terms_ = false;
};

}  // namespace

NodeClasses classify_nodes(const Graph& g) {
  NodeClasses c;
  std::unordered_map<std::string, int> ids;
  std::string key;
  for (const auto& node : g.nodes()) {
    key.clear();
    key += to_string(node.kind);
    auto add_tensors = [&](const std::vector<int>& ts) {
      for (size_t i = 0; i < ts.size(); ++i) {
        const TensorDesc& t = g.tensor(ts[i]);
        key += '|';
        for (int64_t d : t.shape) key += std::to_string(d) + ',';
        key += to_string(t.dtype);
        // Operands that alias one tensor share their addresses: part of the signature.
        for (size_t k = 0; k < i; ++k)
          if (ts[k] == ts[i]) (key += '=') += std::to_string(k);
      }
      key += ';';
    };
    add_tensors(node.inputs);
    add_tensors(node.outputs);
    for (const char* a : {"heads", "activation"})
      if (node.attrs.is_object() && node.attrs.contains(a)) key += std::string(a) + node.attrs.at(a).dump();
    auto [it, fresh] = ids.emplace(key, static_cast<int>(c.first.size()));
    if (fresh) c.first.push_back(node.id);
    c.class_of.push_back(it->second);
  }
  return c;
}

int64_t largest_gemm_k(const Graph& g) {
  int64_t x = 0;
  for (const auto& node : g.nodes())
    if (const auto gm = node.category == Category::gemm ? node_gemm(g, node) : std::nullopt) x = std::max(x, gm->k);
  return x;
}

void check_kernel_fits(const Graph& g, int64_t kernel, const std::string& what) {
  const int64_t largest = largest_gemm_k(g);
  check(largest == 0 || kernel <= largest,
        "{} is {}, larger than the K of every GEMM of the graph (largest K: {}): every weight tile would be "
        "mostly zero padding; use a kernel of at most {}",
        what, kernel, largest, largest);
}

GraphEstimate estimate_graph(const Graph& g, const SystemDesc& s, Arrangement a, const EstimateOptions& o) {
  GraphEstimate ge;
  ge.system = s;
  ge.arrangement = a;
  ge.nodes.reserve(g.nodes().size() + g.nodes().size() / 8);
  if (s.kind == SystemKind::cpu) {
    CpuGraphFacts facts;
    for (const auto& node : g.nodes()) facts.training |= node.phase == Phase::backward;
    for (const auto& node : g.nodes()) {
      NodeEstimate n = cpu_node(g, node, s, facts, o.terms || node.name == o.explain);
      n.name = node.name;
      n.op = to_string(node.kind);
      n.region = region_of(node);
      n.phase = to_string(node.phase);
      ge.nodes.push_back(std::move(n));
    }
    return ge;
  }
  NodeClasses local;
  const NodeClasses* classes = o.classes;
  if (!classes && !o.terms) {
    local = classify_nodes(g);
    classes = &local;
  }
  NodeModel model(g, s, a);
  // Estimates of each class, computed at its first node and copied to the others (24
  // identical encoder layers share them); nodes whose terms are asked for are computed on
  // their own, since the terms name the node.
  std::vector<std::vector<NodeEstimate>> done(classes ? classes->first.size() : 0);
  std::vector<uint8_t> have(done.size(), 0);
  for (const auto& node : g.nodes()) {
    const bool terms = o.terms || node.name == o.explain;
    if (terms || !classes) {
      for (auto& n : model.run(node, terms)) ge.nodes.push_back(std::move(n));
      continue;
    }
    const int c = classes->class_of.at(node.id);
    if (!have[c]) {
      done[c] = model.run(node, false);
      have[c] = 1;
    }
    const std::string region = region_of(node), phase = to_string(node.phase);
    for (const auto& proto : done[c]) {
      NodeEstimate n = proto;
      n.name = n.op == "convert" ? node.name + ".convert" : node.name;
      n.region = region;
      n.phase = phase;
      ge.nodes.push_back(std::move(n));
    }
  }
  return ge;
}

}  // namespace bertlab::hw

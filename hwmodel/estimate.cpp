// The estimate's driver: each node dispatched to its lowering (or the CPU model), node
// classes estimated once and copied, the kernel size checked against the graph.
#include "hwmodel/estimate.h"

#include <algorithm>
#include <exception>
#include <unordered_map>

#include "base/error.h"
#include "hwmodel/estimate_detail.h"
#include "hwmodel/setload.h"

namespace bertlab::hw {

namespace estimate_detail {

std::vector<NodeEstimate> NodeModel::run(const Node& node, bool terms) {
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

}  // namespace estimate_detail

using namespace estimate_detail;

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

namespace {

// The estimate of every node class at its first node, the classes spread over the OpenMP
// threads (each with its own NodeModel: a node's estimate depends on its shapes only, since
// `run` places its operands afresh). Largest GEMMs first, handed out one at a time, so that
// a long class (the vocabulary projection's gradients) does not start last. Only LLCs resolved
// per set (modulo-indexed, small hashed) are worth the threads: on the others a class costs
// about 0.1 ms, which the threads' start and barrier would eat.
std::vector<std::vector<NodeEstimate>> estimate_classes(const Graph& g, const SystemDesc& s, Arrangement a,
                                                        const NodeClasses& classes, StreamWalkMemo* stream_walks) {
  const int64_t n = static_cast<int64_t>(classes.first.size());
  std::vector<std::pair<double, int64_t>> order;  // (GEMM multiply-adds, class)
  order.reserve(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    const Node& node = g.node(classes.first[static_cast<size_t>(c)]);
    const auto gm = node.category == Category::gemm ? node_gemm(g, node) : std::nullopt;
    order.emplace_back(gm ? double(gm->m) * double(gm->n) * double(gm->k) : 0.0, c);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<std::vector<NodeEstimate>> done(static_cast<size_t>(n));
  // An exception must not leave an OpenMP region: the one of the earliest class (graph order,
  // as a serial run would meet it) is kept and rethrown after.
  std::exception_ptr error;
  int64_t error_class = n;
#pragma omp parallel if (n > 1 && (SetLoad::resolves_sets(s.llc) || s.in_order_cores()))
  {
    NodeModel model(g, s, a, stream_walks);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = order[static_cast<size_t>(i)].second;
      try {
        done[static_cast<size_t>(c)] = model.run(g.node(classes.first[static_cast<size_t>(c)]), false);
      } catch (...) {
#pragma omp critical(bertlab_estimate_error)
        if (c < error_class) {
          error = std::current_exception();
          error_class = c;
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
  return done;
}

}  // namespace

void check_arrangement_supported(const SystemDesc& s, Arrangement a) {
  if (!s.in_order_cores()) return;
  check(std::find(kPaperArrangements.begin(), kPaperArrangements.end(), a) != kPaperArrangements.end(),
        "system '{}' (kind {}, array.compute_model {}) prices TiC-SAT's kernels, which exist for the paper's two "
        "arrangements (rwma, bwma) only, not '{}': estimate '{}' with an array compute model (e.g. "
        "configs/systems/paper-ticsat-array.json)",
        s.name, to_string(s.kind), to_string(s.array.compute_model), to_string(a), to_string(a));
}

GraphEstimate estimate_graph(const Graph& g, const SystemDesc& s, Arrangement a, const EstimateOptions& o) {
  GraphEstimate ge;
  ge.system = s;
  ge.arrangement = a;
  ge.nodes.reserve(g.nodes().size() + g.nodes().size() / 8);
  if (s.kind == SystemKind::cpu) {
    CpuGraphFacts facts;
    for (const auto& node : g.nodes()) facts.training |= node.phase == Phase::backward;
    facts.shared_dy = shared_dy_casts(g);
    facts.shared_attn = shared_attention_casts(g);
    facts.handoff = bf16_handoffs(g, facts.training);
    facts.fused = fused_steps(g, s.cores);
    facts.kept_x = kept_x_casts(g);
    auto terms = [&](const Node& node) { return o.terms || node.name == o.explain; };
    for (const auto& node : g.nodes()) {
      NodeEstimate n = cpu_node(g, node, s, facts, terms(node));
      n.name = node.name;
      n.op = to_string(node.kind);
      n.region = region_of(node);
      n.phase = to_string(node.phase);
      ge.nodes.push_back(std::move(n));
    }
    if (s.cpu_model == CpuModel::calibrated)
      cpu_optimizer_runs(g, s, ge.nodes, optimizer_runs(g), terms);
    return ge;
  }
  check_arrangement_supported(s, a);
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
  std::vector<std::vector<NodeEstimate>> done = classes ? estimate_classes(g, s, a, *classes, o.stream_walks) : decltype(done){};
  for (const auto& node : g.nodes()) {
    const bool terms = o.terms || node.name == o.explain;
    if (terms || !classes) {
      for (auto& n : model.run(node, terms)) ge.nodes.push_back(std::move(n));
      continue;
    }
    const int c = classes->class_of.at(node.id);
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

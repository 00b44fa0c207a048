// The rules of the steps after the backward (kernels in ops/optimizer.h, the allreduce in
// runtime/grad_sync.h): the gradient allreduce, the global gradient norm and the AdamW and LAMB
// updates. The executor also runs each run of updates as one fused step (fuse_optimizer_steps).
#include <cmath>

#include "ops/optimizer.h"

#include "base/error.h"
#include "runtime/autodiff.h"
#include "runtime/bert_config.h"
#include "runtime/distributed.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::update {

namespace {

// FLOPs per parameter.
constexpr double kAdamFlops = 12;  // moments (4), bias corrections, sqrt, divide, decay, update
constexpr double kLambFlops = 15;  // Adam's plus the two norms and the trust ratio

// grad_norm: every parameter gradient -> (1) global L2 norm
OutputTypes grad_norm_outputs(const Graph& g, const Node& n) {
  check(!n.inputs.empty(), "node '{}': needs at least one gradient", n.name);
  return f32({{1}});
}
double grad_norm_flops(const Graph& g, const Node& n) {
  double total = 0;
  for (int t : n.inputs) total += 2.0 * g.tensor(t).numel();  // square and sum
  return total;
}
std::function<void()> grad_norm_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  StepContext* ctx = b.context();
  std::vector<std::pair<const float*, int64_t>> grads;
  for (int t : n.inputs) grads.emplace_back(b.f32(t), b.graph().tensor(t).numel());
  return [=] {
    // One parallel region over all gradients, the same sum as sum_of_squares tensor by tensor.
    ctx->grad_norm = std::sqrt(ops::sum_of_squares_fused(grads));
    out[0] = static_cast<float>(ctx->grad_norm);
  };
}

// adamw_update, lamb_update: param, grad, m, v, norm(1) -> param, m, v updated in place;
// attrs decay, segments (LAMB)
OutputTypes update_outputs(const Graph& g, const Node& n) {
  const auto& p = in_shape(g, n, 0);
  for (size_t i = 1; i < 4; ++i)
    check(in_shape(g, n, i) == p, "node '{}': input {} has shape {}, parameter {}", n.name, i,
          shape_str(in_shape(g, n, i)), shape_str(p));
  return f32({p, p, p});
}
double adamw_flops(const Graph& g, const Node& n) { return kAdamFlops * in0_numel(g, n); }
double lamb_flops(const Graph& g, const Node& n) { return kLambFlops * in0_numel(g, n); }
int64_t update_bytes(const Graph& g, const Node& n) {  // read param, grad, m, v; write param, m, v
  return 4 * in_bytes(g, n, 0) + 3 * out_bytes(g, n, 0);
}
std::function<void()> update_kernel(StepBinder& b, const Node& n, bool adamw) {
  StepContext* ctx = b.context();
  float *p = b.in(n, 0), *g = b.in(n, 1), *m = b.in(n, 2), *v = b.in(n, 3);
  const int64_t count = b.graph().tensor(n.inputs[0]).numel();
  const bool decay = n.attrs.at("decay").get<bool>();
  const int segments = n.attrs.value("segments", 1);
  return [=] {
    if (!std::isfinite(ctx->grad_norm)) return;  // diverged: leave the parameters as they are
    const ops::AdamHyper h = optimizer_hyper(*ctx);
    if (adamw)
      ops::adamw_update(p, m, v, g, count, h, decay);
    else
      ops::lamb_update(p, m, v, g, count, h, decay, segments);
  };
}
std::function<void()> adamw_kernel(StepBinder& b, const Node& n) { return update_kernel(b, n, true); }
std::function<void()> lamb_kernel(StepBinder& b, const Node& n) { return update_kernel(b, n, false); }

// allreduce: every parameter gradient -> the same, summed over the ranks in place; attrs
// world_size, bucket_bytes, overlap, precision (on the wire)
OutputTypes allreduce_outputs(const Graph& g, const Node& n) {
  check(!n.inputs.empty(), "node '{}': needs at least one gradient", n.name);
  check(int_attr(n, "world_size") >= 2, "node '{}': attribute 'world_size' must be at least 2", n.name);
  OutputTypes o;  // in place: every input is an output of the same shape
  for (size_t i = 0; i < n.inputs.size(); ++i) o.emplace_back(in_shape(g, n, i), DType::f32);
  return o;
}
double allreduce_flops(const Graph& g, const Node& n) {
  // A ring allreduce's reduce-scatter: each rank adds (W-1)/W of the elements once.
  double total = 0;
  for (int t : n.inputs) total += static_cast<double>(g.tensor(t).numel());
  const double w = static_cast<double>(int_attr(n, "world_size"));
  return total * (w - 1) / w;
}
int64_t allreduce_bytes(const Graph& g, const Node& n) {
  // Local memory traffic of a ring allreduce: each gradient read and written once per phase
  // (reduce-scatter, allgather). The bytes on the wire, 2 (W-1)/W of the gradients per rank,
  // are not memory traffic.
  int64_t total = 0;
  for (int t : n.inputs) total += g.tensor(t).bytes();
  return 4 * total;
}
std::function<void()> allreduce_kernel(StepBinder& b, const Node& n) {
  // Every gradient lives in the one gradient arena (alignment gaps are zero): its buckets are
  // summed in place over the ranks (runtime/grad_sync.h), overlapped with backward unless the
  // node says otherwise; this node waits for them all.
  auto& world = dist::World::get();
  const int64_t ranks = n.attrs.at("world_size").get<int64_t>();
  check(ranks == world.size(), "node '{}': the graph is built for {} ranks, this run has {} (start it with mpirun -np {})",
        n.name, ranks, world.size(), ranks);
  // The whole arena is summed: the gradients of parameters the graph does not train (the
  // pooler and NSP head under --no-nsp) stay zero on every rank.
  const Graph& graph = b.graph();
  for (int t : n.inputs)
    check(graph.tensor(t).role == Role::gradient && b.state().grads.contains(param_of(graph.tensor(t).name)),
          "node '{}': input '{}' is not the gradient of a parameter", n.name, graph.tensor(t).name);
  const RunSpec::Allreduce defaults;
  GradientSync* sync = b.start_sync(std::make_unique<GradientSync>(
      graph, b.state().grads, n.attrs.value("bucket_bytes", defaults.bucket_bytes),
      n.attrs.value("overlap", defaults.overlap),
      precision_from_string(n.attrs.value("precision", "fp32"), "allreduce precision")));
  return [sync] { sync->finish(); };
}

}  // namespace

const OpRules grad_norm{grad_norm_outputs, grad_norm_flops, io_bytes, nullptr, nullptr, grad_norm_kernel};
const OpRules adamw_update{update_outputs, adamw_flops, update_bytes, nullptr, nullptr, adamw_kernel};
const OpRules lamb_update{update_outputs, lamb_flops, update_bytes, nullptr, nullptr, lamb_kernel};
const OpRules allreduce{allreduce_outputs, allreduce_flops, allreduce_bytes, nullptr, nullptr, allreduce_kernel};

}  // namespace bertlab::rules::update

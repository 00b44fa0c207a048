#include "runtime/grad_sync.h"

#include <Eigen/Core>

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "runtime/autodiff.h"
#include "runtime/distributed.h"

namespace bertlab {

std::vector<GradBucket> plan_grad_buckets(const Graph& g, const ParamStore& grads, int64_t bucket_bytes) {
  check(bucket_bytes > 0, "gradient buckets must hold at least one byte, got {}", bucket_bytes);
  // The last node (forward or backward) that reads or writes each gradient: after it the
  // gradient is final for this micro-batch (contributions accumulate with +=).
  std::unordered_map<std::string, int64_t> last_touch;
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.phase != Phase::forward && n.phase != Phase::backward) continue;
    for (const auto* list : {&n.inputs, &n.outputs})
      for (int t : *list)
        if (g.tensor(t).role == Role::gradient) last_touch[param_of(g.tensor(t).name)] = static_cast<int64_t>(i);
  }
  const auto& params = grads.params();
  std::vector<GradBucket> out;
  // From the arena's end: consecutive parameters until the bucket holds bucket_bytes.
  int64_t end = grads.arena_size(), ready = -1, bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const auto it = last_touch.find(params[k].name);
    if (it != last_touch.end()) ready = std::max(ready, it->second);
    bytes += params[k].numel() * static_cast<int64_t>(sizeof(float));
    if (bytes >= bucket_bytes || k == 0) {
      const int64_t begin = k == 0 ? 0 : params[k].offset;
      out.push_back({begin, end, ready});
      end = begin, ready = -1, bytes = 0;
    }
  }
  // Start order: by readiness (every rank computes the same order from the same graph).
  std::stable_sort(out.begin(), out.end(), [](const GradBucket& a, const GradBucket& b) { return a.ready_node < b.ready_node; });
  return out;
}

GradientSync::GradientSync(const Graph& g, ParamStore& grads, int64_t bucket_bytes, bool overlap, Precision wire)
    : grads_(grads), overlap_(overlap), wire_(wire) {
  buckets_ = plan_grad_buckets(g, grads, overlap || wire == Precision::bf16 ? bucket_bytes : grads.arena_size() * 4);
  if (wire_ == Precision::bf16) wire16_.resize(static_cast<size_t>(grads.arena_size()));
  started_after_.assign(buckets_.size(), kAtFinish);
}

void GradientSync::arm() {
  armed_ = overlap_;
  next_ = 0;
  if (armed_) after_node(-1);  // buckets of gradients no node touches
}

void GradientSync::start(size_t b, int64_t after) {
  started_after_[b] = after;
  auto& world = dist::World::get();
  const GradBucket& k = buckets_[b];
  float* data = grads_.arena() + k.begin;
  switch (wire_) {
    case Precision::fp32:
      world.start_allreduce_sum(data, k.end - k.begin);
      return;
    case Precision::bf16: {
      auto* w = reinterpret_cast<Eigen::bfloat16*>(wire16_.data() + k.begin);
      const int64_t n = k.end - k.begin;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) w[i] = Eigen::bfloat16(data[i]);
      world.start_allreduce_sum_bf16(wire16_.data() + k.begin, n);
      return;
    }
  }
}

void GradientSync::after_node(int64_t node) {
  if (!armed_) return;
  while (next_ < buckets_.size() && buckets_[next_].ready_node <= node) start(next_++, node);
}

void GradientSync::finish() {
  if (!overlap_ && wire_ == Precision::fp32) {
    // The flat allreduce after backward: one blocking sum of the whole arena.
    dist::World::get().allreduce_sum(grads_.arena(), grads_.arena_size());
    return;
  }
  while (next_ < buckets_.size()) start(next_++, kAtFinish);
  dist::World::get().wait_all();
  armed_ = false;
  next_ = 0;
  if (wire_ != Precision::bf16) return;
  const auto* w = reinterpret_cast<const Eigen::bfloat16*>(wire16_.data());
  float* data = grads_.arena();
  const int64_t n = grads_.arena_size();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(w[i]);
}

}  // namespace bertlab

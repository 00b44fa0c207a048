#include "runtime/grad_sync.h"

#include <Eigen/Core>

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "base/error.h"
#include "runtime/autodiff.h"
#include "runtime/distributed.h"

namespace bertlab {

std::vector<RowSparseGrad> row_sparse_grads(const Graph& g, const ParamStore& grads) {
  std::vector<RowSparseGrad> out;
  for (const Node& n : g.nodes()) {
    if (n.kind != OpKind::embedding_grad) continue;
    const TensorDesc& t = g.tensor(n.outputs.at(0));
    const std::string param = param_of(t.name);
    if (t.role != Role::gradient || !grads.contains(param) || t.shape.size() != 2) continue;
    out.push_back({n.id, param, grads.info(param).offset, t.shape[0], t.shape[1]});
  }
  return out;
}

std::vector<GradBucket> plan_grad_buckets(const Graph& g, const ParamStore& grads, int64_t bucket_bytes,
                                          bool defer_rows) {
  check(bucket_bytes > 0, "gradient buckets must hold at least one byte, got {}", bucket_bytes);
  std::set<std::string> own_bucket;  // deferred row-sparse gradients
  std::set<std::pair<int64_t, int>> deferred_writes;  // (node, tensor) not waited for
  if (defer_rows)
    for (const auto& r : row_sparse_grads(g, grads)) {
      own_bucket.insert(r.param);
      deferred_writes.insert({r.node, g.nodes()[static_cast<size_t>(r.node)].outputs[0]});
    }
  // The last node (forward or backward) that reads or writes each gradient: after it the
  // gradient is final for this micro-batch (contributions accumulate with +=).
  std::unordered_map<std::string, int64_t> last_touch;
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.phase != Phase::forward && n.phase != Phase::backward) continue;
    for (const auto* list : {&n.inputs, &n.outputs})
      for (int t : *list)
        if (g.tensor(t).role == Role::gradient && !deferred_writes.count({static_cast<int64_t>(i), t}))
          last_touch[param_of(g.tensor(t).name)] = static_cast<int64_t>(i);
  }
  const auto& params = grads.params();
  std::vector<GradBucket> out;
  // From the arena's end: consecutive parameters until the bucket holds bucket_bytes.
  int64_t end = grads.arena_size(), ready = -1, bytes = 0;
  auto close = [&](int64_t begin) {
    out.push_back({begin, end, ready});
    end = begin, ready = -1, bytes = 0;
  };
  for (size_t k = params.size(); k-- > 0;) {
    const bool own = own_bucket.count(params[k].name) > 0;
    if (own && bytes > 0) close(params[k + 1].offset);  // the parameters after it
    const auto it = last_touch.find(params[k].name);
    if (it != last_touch.end()) ready = std::max(ready, it->second);
    bytes += params[k].numel() * static_cast<int64_t>(sizeof(float));
    if (own || bytes >= bucket_bytes || k == 0) close(k == 0 ? 0 : params[k].offset);
  }
  // Start order: by readiness (every rank computes the same order from the same graph).
  std::stable_sort(out.begin(), out.end(), [](const GradBucket& a, const GradBucket& b) { return a.ready_node < b.ready_node; });
  return out;
}

GradientSync::GradientSync(const Graph& g, ParamStore& grads, int64_t bucket_bytes, bool overlap, Precision wire)
    : grads_(grads), overlap_(overlap), wire_(wire) {
  // Overlapped: the embedding rows are deferred (their table's bucket leaves early).
  buckets_ = plan_grad_buckets(g, grads, overlap || wire == Precision::bf16 ? bucket_bytes : grads.arena_size() * 4,
                               /*defer_rows=*/overlap);
  if (wire_ == Precision::bf16) wire16_.resize(static_cast<size_t>(grads.arena_size()));
  started_after_.assign(buckets_.size(), kAtFinish);
  if (overlap_) {
    for (auto& r : row_sparse_grads(g, grads)) {
      Deferred d;
      d.grad = std::move(r);
      d.slot.assign(static_cast<size_t>(d.grad.rows), -1);
      deferred_.push_back(std::move(d));
    }
  }
}

bool GradientSync::defers_rows(int64_t node) const {
  if (!armed_) return false;
  for (const auto& d : deferred_)
    if (d.grad.node == node) return true;
  return false;
}

GradientSync::CompactRows GradientSync::rows_for(int64_t node, const int32_t* ids, int64_t count) {
  for (auto& d : deferred_) {
    if (d.grad.node != node) continue;
    // The batch's distinct ids, ascending, numbered 0.. (the slot map is all -1 between steps).
    for (int64_t t = 0; t < count; ++t)
      check(ids[t] >= 0 && ids[t] < d.grad.rows, "token id {} outside the {}-row table '{}'", ids[t], d.grad.rows,
            d.grad.param);
    d.distinct.clear();
    for (int64_t t = 0; t < count; ++t)
      if (d.slot[static_cast<size_t>(ids[t])] < 0) d.slot[static_cast<size_t>(ids[t])] = 0, d.distinct.push_back(ids[t]);
    std::sort(d.distinct.begin(), d.distinct.end());
    for (size_t k = 0; k < d.distinct.size(); ++k) d.slot[static_cast<size_t>(d.distinct[k])] = static_cast<int32_t>(k);
    d.renumbered.resize(static_cast<size_t>(count));
    for (int64_t t = 0; t < count; ++t) d.renumbered[static_cast<size_t>(t)] = d.slot[static_cast<size_t>(ids[t])];
    d.rows.assign(d.distinct.size() * static_cast<size_t>(d.grad.width), 0.0f);
    d.pending = true;
    return {d.rows.data(), d.renumbered.data()};
  }
  fail("node {} has no deferred rows", node);
}

void GradientSync::add_deferred_rows() {
  for (auto& d : deferred_) {
    if (!d.pending) continue;
    d.pending = false;
    // Packed: the id count, the ids, the rows (ascending ids).
    const int64_t n = static_cast<int64_t>(d.distinct.size()), w = d.grad.width;
    std::vector<std::byte> mine(sizeof(int64_t) + static_cast<size_t>(n) * (sizeof(int32_t) + w * sizeof(float)));
    std::memcpy(mine.data(), &n, sizeof n);
    std::memcpy(mine.data() + sizeof n, d.distinct.data(), static_cast<size_t>(n) * sizeof(int32_t));
    std::memcpy(mine.data() + sizeof n + n * sizeof(int32_t), d.rows.data(), d.rows.size() * sizeof(float));
    for (int32_t id : d.distinct) d.slot[static_cast<size_t>(id)] = -1;
    const auto all = dist::World::get().allgather(mine);
    float* table = grads_.arena() + d.grad.offset;
    // Every rank adds the same rows in the same order (rank, then id): identical sums.
    for (const auto& bytes : all) {
      int64_t m = 0;
      check(bytes.size() >= sizeof m, "deferred rows of '{}': a rank sent {} bytes", d.grad.param, bytes.size());
      std::memcpy(&m, bytes.data(), sizeof m);
      check(m >= 0 && bytes.size() == sizeof m + static_cast<size_t>(m) * (sizeof(int32_t) + w * sizeof(float)),
            "deferred rows of '{}': a rank sent {} bytes for {} rows", d.grad.param, bytes.size(), m);
      std::vector<int32_t> ids(static_cast<size_t>(m));
      std::memcpy(ids.data(), bytes.data() + sizeof m, ids.size() * sizeof(int32_t));
      for (int32_t id : ids)
        check(id >= 0 && id < d.grad.rows, "deferred rows of '{}': a rank sent row {} of {}", d.grad.param, id, d.grad.rows);
      const auto* rows = reinterpret_cast<const float*>(bytes.data() + sizeof m + m * sizeof(int32_t));
      // A rank's ids are distinct: no two threads add to the same row.
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < m; ++k) {
        float* dst = table + int64_t(ids[static_cast<size_t>(k)]) * w;
        const float* src = rows + k * w;
        for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
      }
    }
  }
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
  if (wire_ == Precision::bf16) {
    const auto* w = reinterpret_cast<const Eigen::bfloat16*>(wire16_.data());
    float* data = grads_.arena();
    const int64_t n = grads_.arena_size();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(w[i]);
  }
  add_deferred_rows();
}

}  // namespace bertlab

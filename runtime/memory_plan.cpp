#include "runtime/memory_plan.h"

#include <algorithm>

namespace bertlab {

bool runs_in_place(OpKind k) { return op_info(k).in_place == InPlace::yes; }

MemoryPlan plan_memory(const Graph& g, int64_t alignment, const std::vector<char>& apart,
                       const std::vector<uint8_t>& runs) {
  const int n_tensors = static_cast<int>(g.tensors().size());
  const int end = static_cast<int>(g.nodes().size());
  // Each node's run (first and last node; itself when it runs alone).
  std::vector<int> run_first(end), run_last(end);
  for (int i = 0; i < end; ++i) {
    const int k = runs.empty() ? 1 : runs.at(static_cast<size_t>(i));
    if (k == 0) continue;  // set by the run's first node
    for (int j = i; j < i + k; ++j) run_first[j] = i, run_last[j] = i + k - 1;
  }
  std::vector<int> first(n_tensors, end + 1), last(n_tensors, -1);
  auto placed_role = [](Role r) { return r == Role::input || r == Role::activation; };
  // Inputs are written before run() and may be run again: they live through the whole run.
  for (const auto& t : g.tensors())
    if (t.role == Role::input) first[t.id] = -1, last[t.id] = end;
  // A run's inside: the tensors it writes that no node outside it reads (-1: not written yet).
  std::vector<int> inside(n_tensors, -1);
  for (const auto& n : g.nodes()) {
    for (int t : n.outputs) {
      first[t] = std::min(first[t], run_first[n.id]), last[t] = std::max(last[t], run_last[n.id]);
      if (run_first[n.id] != run_last[n.id]) inside[t] = run_first[n.id];
    }
    for (int t : n.inputs) {
      last[t] = std::max(last[t], run_last[n.id]);
      if (inside[t] >= 0 && inside[t] != run_first[n.id]) inside[t] = -2;  // read outside its run
    }
  }
  for (const auto& [name, t] : g.outputs()) last[t] = end, inside[t] = -2;
  auto internal = [&](int t) {
    if (inside[t] < 0) return false;
    const int r = inside[t];  // written in run r, read only there: is it the run's last output?
    for (int u : g.node(run_last[r]).outputs)
      if (u == t) return false;
    return true;
  };

  // In place: an element-wise node whose input dies at that node writes over it. The output
  // then joins the input's buffer (`owner`), whose lifetime grows to the output's last use.
  std::vector<int> owner(n_tensors);
  for (int t = 0; t < n_tensors; ++t) owner[t] = t;
  std::vector<bool> is_output(n_tensors, false);
  for (const auto& [name, t] : g.outputs()) is_output[t] = true;
  for (const auto& n : g.nodes()) {
    if (!runs_in_place(n.kind) || n.outputs.size() != 1 || run_first[n.id] != run_last[n.id]) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (!apart.empty() && apart.at(static_cast<size_t>(out))) continue;
    const auto& ti = g.tensor(in);
    if (ti.role != Role::activation || is_output[in] || last[in] != n.id || first[out] != n.id ||
        ti.bytes() != g.tensor(out).bytes())
      continue;
    owner[out] = owner[in];
    last[owner[in]] = std::max(last[owner[in]], last[out]);
  }

  std::vector<int> order;
  for (const auto& t : g.tensors())
    if (placed_role(t.role) && owner[t.id] == t.id && last[t.id] >= first[t.id] && !internal(t.id))
      order.push_back(t.id);
  // Largest first, then earliest: a classic greedy that packs big blocks tightly.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return g.tensor(a).bytes() > g.tensor(b).bytes();
  });

  MemoryPlan plan;
  plan.offset.assign(n_tensors, -1);
  struct Block {
    int64_t begin, end;
    int first, last;
  };
  std::vector<Block> placed;
  for (int t : order) {
    const int64_t size = (g.tensor(t).bytes() + alignment - 1) / alignment * alignment;
    plan.unshared_bytes += size;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const auto& b : placed)
      if (b.first <= last[t] && first[t] <= b.last) busy.emplace_back(b.begin, b.end);
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [b0, b1] : busy) {
      if (offset + size <= b0) break;
      offset = std::max(offset, b1);
    }
    plan.offset[t] = offset;
    placed.push_back({offset, offset + size, first[t], last[t]});
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
  }
  for (int t = 0; t < n_tensors; ++t)
    if (owner[t] != t) {
      plan.offset[t] = plan.offset[owner[t]];
      plan.unshared_bytes += (g.tensor(t).bytes() + alignment - 1) / alignment * alignment;
    }
  return plan;
}

}  // namespace bertlab

#include "runtime/skip_micro_batches.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace bertlab {

std::string first_non_finite(const ParamStore& grads) {
  for (const auto& p : grads.params()) {
    const float* g = grads.data(p.name);
    for (int64_t i = 0, n = p.numel(); i < n; ++i)
      if (!std::isfinite(g[i])) return p.name;
  }
  return "";
}

std::vector<DroppedMicroBatch> micro_batches_at_fault(const std::vector<std::string>& loss_reasons, int64_t K,
                                                      const std::string& what) {
  std::vector<DroppedMicroBatch> at_fault;
  for (size_t k = 0; k < loss_reasons.size(); ++k)
    if (!loss_reasons[k].empty()) at_fault.push_back({static_cast<int64_t>(k), what});
  if (at_fault.empty())
    for (int64_t k = 0; k < K; ++k) at_fault.push_back({k, what});
  return at_fault;
}

namespace {

std::string describe(const std::vector<DroppedMicroBatch>& at_fault) {
  std::string s;
  for (const auto& d : at_fault) s += (s.empty() ? "" : "; ") + d.reason;
  return s;
}

}  // namespace

std::vector<DroppedMicroBatch> update_without_non_finite(int64_t step, const std::vector<std::string>& loss_reasons,
                                                         int64_t may_drop, const AccumulationParts& parts) {
  const int64_t K = static_cast<int64_t>(loss_reasons.size());
  std::vector<DroppedMicroBatch> at_fault;
  auto name = [&](int64_t k, const std::string& why) { return fmt::format("step {}, micro-batch {} of {}: {}", step, k, K, why); };
  auto others = [&] {
    std::vector<int64_t> use;
    for (int64_t k = 0; k < K; ++k)
      if (std::none_of(at_fault.begin(), at_fault.end(), [&](const DroppedMicroBatch& d) { return d.micro == k; }))
        use.push_back(k);
    return use;
  };
  for (int64_t k = 0; k < K; ++k)
    if (!loss_reasons[k].empty()) at_fault.push_back({k, name(k, loss_reasons[k])});
  // Every loss finite: the gradients were not.
  bool find_gradients = at_fault.empty();
  // Each round leaves out at least one more micro-batch, or ends.
  for (;;) {
    if (find_gradients) {
      const size_t before = at_fault.size();
      for (int64_t k : others()) {
        parts.accumulate({k});
        if (const std::string p = parts.first_non_finite_gradient(); !p.empty())
          at_fault.push_back({k, name(k, fmt::format("gradients are not finite; first: grad of '{}'", p))});
      }
      if (at_fault.size() == before) {
        // Each one's gradients are finite, their sum is not: the step cannot be saved.
        for (int64_t k : others()) at_fault.push_back({k, name(k, "the sum of the micro-batches' gradients is not finite")});
        std::sort(at_fault.begin(), at_fault.end(), [](const auto& a, const auto& b) { return a.micro < b.micro; });
        throw NonfiniteError(fmt::format("step {}: gradients are not finite, summed over its {} micro-batches, though "
                                         "each one's are", step, K), at_fault);
      }
      std::sort(at_fault.begin(), at_fault.end(), [](const auto& a, const auto& b) { return a.micro < b.micro; });
    }
    const int64_t n = static_cast<int64_t>(at_fault.size());
    if (n == K)
      throw NonfiniteError(fmt::format("step {}: all {} micro-batches are not finite ({})", step, K, describe(at_fault)),
                           at_fault);
    if (n > may_drop)
      throw NonfiniteError(fmt::format("step {}: {} of {} micro-batches are not finite ({})", step, n, K,
                                       describe(at_fault)), at_fault);
    const std::vector<int64_t> use = others();
    const std::vector<std::string> again = parts.accumulate(use);
    find_gradients = true;
    for (size_t i = 0; i < use.size(); ++i)
      if (!again[i].empty()) at_fault.push_back({use[i], name(use[i], again[i])}), find_gradients = false;
    if (!find_gradients) {
      std::sort(at_fault.begin(), at_fault.end(), [](const auto& a, const auto& b) { return a.micro < b.micro; });
      continue;  // a loss not finite on its second run (not deterministic): leave it out too
    }
    if (parts.update()) return at_fault;
  }
}

std::vector<DroppedMicroBatch> update_unless_non_finite(int64_t step, int64_t K, bool loss_finite,
                                                        const std::vector<std::string>& loss_reasons, int64_t may_drop,
                                                        const AccumulationParts& parts,
                                                        const std::function<std::string()>& loss_error,
                                                        const std::function<std::string()>& gradient_error) {
  if (!loss_finite) {
    const std::string what = loss_error();
    if (may_drop <= 0) throw NonfiniteError(what, micro_batches_at_fault(loss_reasons, K, what));
    return update_without_non_finite(step, loss_reasons, may_drop, parts);
  }
  if (parts.update()) return {};
  const std::string what = gradient_error();
  if (may_drop <= 0) throw NonfiniteError(what, micro_batches_at_fault({}, K, what));
  return update_without_non_finite(step, loss_reasons, may_drop, parts);
}

}  // namespace bertlab

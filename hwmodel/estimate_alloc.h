#pragma once
// Address allocation of the estimate: every tensor of a node placed once in a bump
// allocator, matrices laid out in the arrangement (layout.h). Part of the estimate's
// internals (estimate_detail.h).
#include <algorithm>
#include <map>
#include <string>

#include "hwmodel/layout.h"
#include "hwmodel/system.h"
#include "runtime/graph.h"

namespace bertlab::hw::estimate_detail {

// A tensor as a stack of matrices: rank >= 4 (attention scores) stacks batch x heads
// matrices of the last two dims; otherwise the leading dims fold into rows.
struct Mats {
  int64_t batch = 1, rows = 1, cols = 1;
};
inline Mats mats_of(const TensorDesc& t) {
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

class Lowering {
 public:
  Lowering(const Graph& g, const SystemDesc& s, Arrangement a) : g_(g), s_(s), a_(a) {
    S_ = s.array.kernel;
    e_ = s.elem_bytes;
  }

  // Each tensor placed once, operand_offset_bytes past the start of a DRAM row (addresses are
  // only used for line, page and row arithmetic, so a simple bump allocator is enough). An
  // offset shifts every tensor alike, so the bytes a tensor spills into the next row precede
  // the next tensor's own offset.
  uint64_t place(const std::string& key, int64_t bytes) {
    auto it = base_.find(key);
    if (it != base_.end()) return it->second;
    const uint64_t b = next_ + static_cast<uint64_t>(s_.operand_offset_bytes);
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
  // A matrix of its own in the arrangement, or row-major whatever the arrangement.
  MatrixView fresh(const std::string& key, int64_t rows, int64_t cols, int64_t index = 0,
                   int64_t batch = 1, bool row_major = false) {
    const int64_t bytes = row_major ? row_major_bytes(rows, cols, e_) : view_bytes(a_, rows, cols, e_, S_);
    const uint64_t base = place(key, bytes * batch) + index * bytes;
    return row_major ? row_major_view(base, rows, cols, e_) : make_view(a_, base, rows, cols, e_, S_);
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

}  // namespace bertlab::hw::estimate_detail

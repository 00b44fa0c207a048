#include "hwmodel/layout.h"

#include <algorithm>

#include "base/error.h"

namespace bertlab::hw {

MatrixView make_view(Arrangement a, uint64_t base, int64_t rows, int64_t cols, int64_t elem,
                     int64_t S) {
  MatrixView v;
  v.base = base;
  v.rows = rows;
  v.cols = cols;
  v.elem = elem;
  const ArrangementDesc& d = arrangement_desc(a);
  if (!d.panel_width) {  // no panel form: every address through the layout's function
    v.address = d.address;
    v.whole = {base, rows, cols, elem, S};
    return v;
  }
  const int64_t pw = d.panel_width(S);
  if (pw == 0) {
    v.row_stride = cols * elem;
  } else {
    v.panel_width = pw;
    v.row_stride = pw * elem;
    v.panel_stride = rows * pw * elem;
  }
  return v;
}

int64_t view_bytes(Arrangement a, int64_t rows, int64_t cols, int64_t elem, int64_t S) {
  return arrangement_desc(a).bytes(rows, cols, elem, S);
}

MatrixView row_major_view(uint64_t base, int64_t rows, int64_t cols, int64_t elem) {
  MatrixView v;
  v.base = base;
  v.rows = rows;
  v.cols = cols;
  v.elem = elem;
  v.row_stride = cols * elem;
  return v;
}

int64_t rows_sharing_a_line(const MatrixView& v, int64_t line) {
  if (!v.address) return v.panel_width ? std::max<int64_t>(1, line / v.row_stride) : 1;
  int64_t n = 1;
  const uint64_t first = v.addr(0, 0) / line;
  while (n < v.rows && v.addr(n, 0) / line == first) ++n;
  return n;
}

MatrixView sub_view(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  check(r0 >= 0 && c0 >= 0 && r0 + nr <= v.rows && c0 + nc <= v.cols,
        "sub-view [{}+{}, {}+{}] outside a {} x {} matrix", r0, nr, c0, nc, v.rows, v.cols);
  MatrixView s = v;
  if (v.address) s.row0 = v.row0 + r0;
  else s.base = v.base + r0 * v.row_stride;
  s.rows = nr;
  s.cols = nc;
  s.col0 = v.col0 + c0;
  return s;
}

// Standard reduction: peel off the integer parts of a/m and b/m, then swap roles.
uint64_t floor_sum(uint64_t n, uint64_t m, uint64_t a, uint64_t b) {
  uint64_t ans = 0;
  while (true) {
    if (a >= m) {
      ans += (n * (n - 1) / 2) * (a / m);
      a %= m;
    }
    if (b >= m) {
      ans += n * (b / m);
      b %= m;
    }
    const uint64_t y_max = a * n + b;
    if (y_max < m) break;
    n = y_max / m;
    b = y_max % m;
    std::swap(m, a);
  }
  return ans;
}

int64_t distinct_blocks(const Sweep& s, int64_t block) {
  if (s.count <= 0 || s.width <= 0) return 0;
  const uint64_t B = block;
  if (s.count == 1 || s.stride <= s.width) {  // one contiguous span
    return static_cast<int64_t>((s.end() - 1) / B - s.start / B + 1);
  }
  const uint64_t n = s.count, st = s.stride, w = s.width;
  // Blocks of each segment: floor((x_i + w - 1)/B) - floor(x_i/B) + 1.
  const uint64_t per_segment = floor_sum(n, B, st, s.start + w - 1) - floor_sum(n, B, st, s.start) + n;
  // Segment i shares its first block with the last block of segment i-1 iff
  // floor(x_i/B) == floor((x_i - g)/B) with g = stride - width + 1, i.e. x_i mod B >= g.
  const uint64_t g = st - w + 1;
  uint64_t shared = 0;
  if (g < B) {
    const uint64_t x1 = s.start + st;  // segments 1..n-1
    const uint64_t below_g = floor_sum(n - 1, B, st, x1) - floor_sum(n - 1, B, st, x1 - g);
    shared = (n - 1) - below_g;
  }
  return static_cast<int64_t>(per_segment - shared);
}

// Inlined into block_sweeps, the closed forms' hottest caller, whatever the other callers (speed only).
[[gnu::always_inline]] static inline void push_merged(std::vector<Sweep>& out, Sweep s) {
  if (s.count > 1 && s.stride == s.width) {  // contiguous rows: one span
    s.width = s.count * s.stride;
    s.count = 1;
    s.stride = s.width;
  }
  if (!out.empty()) {
    Sweep& p = out.back();
    if (p.count == 1 && s.count == 1 && p.end() == s.start) {
      p.width += s.width;
      p.stride = p.width;
      return;
    }
  }
  out.push_back(s);
}

// A layout with no panel form: the runs of consecutive addresses of each row, sorted by
// address (storage order), adjacent ones merged.
static std::vector<Sweep> layout_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<Sweep> runs, out;
  const int64_t e = v.elem;
  for (int64_t r = r0; r < r0 + nr; ++r)
    for (int64_t c = c0; c < c0 + nc;) {
      const uint64_t a = v.addr(r, c);
      int64_t n = 1;
      while (c + n < c0 + nc && v.addr(r, c + n) == a + n * e) ++n;
      runs.push_back({a, 1, n * e, n * e});
      c += n;
    }
  std::sort(runs.begin(), runs.end(), [](const Sweep& x, const Sweep& y) { return x.start < y.start; });
  for (const auto& s : runs) push_merged(out, s);
  return out;
}

std::vector<Sweep> block_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc) {
  std::vector<Sweep> out;
  if (nr <= 0 || nc <= 0) return out;
  if (v.address) return layout_sweeps(v, r0, nr, c0, nc);
  if (v.panel_width == 0) {
    push_merged(out, {v.addr(r0, c0), nr, v.row_stride, nc * v.elem});
    return out;
  }
  int64_t c = c0;
  while (c < c0 + nc) {
    const int64_t in_panel = (c + v.col0) % v.panel_width;
    const int64_t take = std::min(v.panel_width - in_panel, c0 + nc - c);
    push_merged(out, {v.addr(r0, c), nr, v.row_stride, take * v.elem});
    c += take;
  }
  return out;
}

std::vector<Sweep> strip_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc, int64_t line) {
  if (v.panel_width != 0 || v.address) return block_sweeps(v, r0, nr, c0, nc);
  std::vector<Sweep> out;
  int64_t c = c0;
  while (c < c0 + nc) {
    const uint64_t a = v.addr(r0, c);
    const int64_t room = (line - static_cast<int64_t>(a % line)) / v.elem;
    const int64_t take = std::max<int64_t>(1, std::min(room, c0 + nc - c));
    out.push_back({a, nr, v.row_stride, take * v.elem});
    c += take;
  }
  return out;
}

int64_t lines_of(const std::vector<Sweep>& sweeps, int64_t line) {
  int64_t n = 0;
  for (const auto& s : sweeps) n += distinct_blocks(s, line);
  return n;
}

}  // namespace bertlab::hw

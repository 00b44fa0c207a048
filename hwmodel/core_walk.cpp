// The core model's schedules other than the GEMM's (core_walk.h): TiC-SAT's K transpose, its
// row ops and the element-wise line streams, the last sampled as loops of lines on request. The
// GEMM's schedule is in core_walk_gemm.cpp, the simulator driver in core_sim.cpp.
#include "hwmodel/core_walk.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "base/error.h"
#include "hwmodel/encoder_layer.h"

namespace bertlab::hw {

namespace {

// Sampled line streams (line_share; SystemDesc::core_walk): iterations of a loop walked before its
// representatives.
// Two: the first meets cold caches, the second the state the loop leaves behind itself (the
// previous iteration's lines), which every later iteration meets too.
constexpr int64_t kSampleHead = 2;
// A loop is sampled only when that walks at most a quarter of its iterations: a short loop's
// edges weigh too much to extrapolate from, and walking it costs little.
constexpr int64_t kSampleMinSaving = 4;

// Representative blocks of a sampled loop, spread evenly over its steady iterations: the cache
// state an iteration meets varies with its place (which L1 and LLC sets its lines take beside
// the reused operand's), so one place alone can be several percent off the mean.
constexpr int64_t kSampleStrata = 4;
// Line streams are sampled only beyond this many times the LLC's lines (line_share).
constexpr int64_t kStreamSampleLlcs = 16;

// An iteration of a schedule's loop as walked, and how many iterations it stands for.
struct Visit {
  int64_t index, weight;
};
// Every iteration once (exact), or, sampled: the first kSampleHead; the steady iterations up
// to the last split into kSampleStrata equal strata, each walked as its first `block`
// iterations standing for the whole stratum, after the iteration before it walked with weight 0
// (it restores what the skipped iterations leave for their successor: the lines and pages two
// neighbouring chunks share); and the last (an edge: a partial chunk, the final state the flush
// writes back). The block spans the period at which the iterations' addresses
// cross pages (an iteration that advances an operand by a quarter page misses the TLB every
// fourth time); a stratum's iterations are shared out evenly over its block (the first ones
// one more when they do not divide).
std::vector<Visit> loop_visits(int64_t count, bool sampled, int64_t block = 1) {
  std::vector<Visit> v;
  block = std::max<int64_t>(1, block);
  if (!sampled || count < kSampleMinSaving * (kSampleHead + kSampleStrata * (block + 1) + 1)) {
    for (int64_t i = 0; i < count; ++i) v.push_back({i, 1});
    return v;
  }
  for (int64_t i = 0; i < kSampleHead; ++i) v.push_back({i, 1});  // the cold start and the warm-up
  const int64_t middle = count - kSampleHead - 1;
  for (int64_t k = 0; k < kSampleStrata; ++k) {
    const int64_t first = kSampleHead + middle * k / kSampleStrata, n = middle * (k + 1) / kSampleStrata - middle * k / kSampleStrata;
    if (first - 1 != v.back().index) v.push_back({first - 1, 0});  // re-warms what the skip left cold, counts nothing
    for (int64_t i = 0; i < block; ++i) v.push_back({first + i, even_share(n, block, i)});
  }
  v.push_back({count - 1, 1});  // the edge
  return v;
}

// Iterations after which an operand advancing `advance` bytes per iteration has crossed a page
// (a power of two; 1 without a TLB), at most 64: the representative block of loop_visits.
int64_t page_period(const SystemDesc& s, int64_t advance) {
  if (s.tlb.entries <= 0 || advance <= 0) return 1;
  return std::clamp<int64_t>(std::bit_ceil(static_cast<uint64_t>(ceil_div(s.tlb.page_bytes, advance))), 1, 64);
}


// Rows [first, last) of a row op's core.
using Range = std::pair<int64_t, int64_t>;

// The accesses of row r of `v` (len elements): one contiguous run (row-major) or one piece
// per panel.
void row_segs(const MatrixView& v, int op, int64_t r, int64_t len, bool write, std::vector<CoreSeg>& out) {
  if (v.panel_width == 0) {
    out.push_back({op, v.addr(r, 0), len * v.elem, write});
    return;
  }
  for (int64_t j = 0; j < len; j += v.panel_width)
    out.push_back({op, v.addr(r, j), std::min(v.panel_width, len - j) * v.elem, write});
}

bool same_view(const MatrixView& a, const MatrixView& b) {
  return a.base == b.base && a.row_stride == b.row_stride && a.panel_width == b.panel_width &&
         a.panel_stride == b.panel_stride && a.col0 == b.col0;
}

}  // namespace

CoreShare transpose_share(const std::vector<TransposePair>& pairs, int64_t S, int64_t P, int64_t core, int src,
                          int dst) {
  CoreShare c;
  if (pairs.empty()) {
    c.steps = [](std::vector<CoreSeg>&) { return false; };
    return c;
  }
  const MatrixView& s0 = pairs.front().src;
  const int64_t R = s0.rows, C = s0.cols, e = s0.elem;
  const int64_t n_pairs = static_cast<int64_t>(pairs.size());
  if (contiguous_tiles(s0, S) && contiguous_tiles(pairs.front().dst, S)) {
    // Tile by tile: the core's tile rows i, every tile column j.
    const auto [i0, i1] = core_rows(ceil_div(R, S), P, core, 1);
    const int64_t n = (i1 - i0) * ceil_div(C, S);
    c.units = n_pairs * n * ceil_div(S * S * e, 4), c.groups = n_pairs * n;
    int64_t k = 0;
    c.steps = [=](std::vector<CoreSeg>& o) mutable {
      if (k >= n_pairs * n) return false;
      const TransposePair& p = pairs[static_cast<size_t>(k / n)];
      const int64_t i = i0 + (k % n) / ceil_div(C, S), j = (k % n) % ceil_div(C, S);
      o.push_back({src, p.src.addr(i * S, j * S), S * S * e, false});
      o.push_back({dst, p.dst.addr(j * S, i * S), S * S * e, true});
      ++k;
      return true;
    };
    return c;
  }
  // Blocks of 4 x 4 bytes (b x b elements): per block row i of the core, per block column j,
  // b words read from b rows of src and b words written into b rows of dst.
  const int64_t b = std::max<int64_t>(1, 4 / e), wb = b * e;
  const auto [i0, i1] = core_rows(ceil_div(R, b), P, core, 1);
  const int64_t n = i1 - i0;
  c.units = n_pairs * n * C, c.groups = n_pairs * n;
  int64_t k = 0;
  c.steps = [=](std::vector<CoreSeg>& o) mutable {
    if (k >= n_pairs * n) return false;
    const TransposePair& p = pairs[static_cast<size_t>(k / n)];
    const int64_t i = i0 + k % n;
    for (int64_t j = 0; j < ceil_div(C, b); ++j) {
      for (int64_t q = 0; q < b && b * i + q < R; ++q) o.push_back({src, p.src.addr(b * i + q, b * j), wb, false});
      for (int64_t q = 0; q < b && b * j + q < C; ++q) o.push_back({dst, p.dst.addr(b * j + q, b * i), wb, true});
    }
    ++k;
    return true;
  };
  return c;
}

CoreShare row_share(const std::vector<RowMats>& mats, int64_t rows, int64_t len, int passes, bool every_pass_writes,
                    int64_t line, int64_t P, int64_t core, const std::vector<int>& input_ids, int output_id) {
  CoreShare c;
  check(!mats.empty() && !mats.front().inputs.empty() && passes >= 1, "core model: a row op needs an input and a pass");
  const MatrixView& v0 = mats.front().inputs.front();
  // Rows that share a line (BWMA panels of S-element rows) stay on one core.
  const int64_t align = v0.panel_width > 0 ? std::max<int64_t>(1, line / (v0.panel_width * v0.elem)) : 1;
  const Range r01 = core_rows(rows, P, core, align);
  const int64_t r0 = r01.first, n = r01.second - r01.first, m = static_cast<int64_t>(mats.size());
  c.units = m * n * passes * len, c.groups = m * n;
  int64_t k = 0;
  c.steps = [=](std::vector<CoreSeg>& o) mutable {
    if (k >= m * n * passes) return false;
    const RowMats& x = mats[static_cast<size_t>(k / (n * passes))];
    const int64_t r = r0 + (k % (n * passes)) / passes, pass = k % passes;
    const bool in_place = same_view(x.inputs.front(), x.output);
    const bool writes = every_pass_writes || pass == passes - 1;
    if (every_pass_writes && pass > 0) {
      row_segs(x.output, output_id, r, len, true, o);  // the row rewritten in place
    } else {
      row_segs(x.inputs.front(), input_ids.front(), r, len, writes && in_place, o);
      if (writes && !in_place) row_segs(x.output, output_id, r, len, true, o);
    }
    for (size_t i = 1; i < x.inputs.size(); ++i) row_segs(x.inputs[i], input_ids[i], r, len, false, o);
    ++k;
    return true;
  };
  return c;
}

CoreShare line_share(const std::vector<LineStream>& streams, int64_t unit_bytes, const SystemDesc& s, int64_t core) {
  const int64_t line = s.l1.line_bytes, P = s.cores;
  CoreShare c;
  struct Part {
    LineStream s;
    int64_t l0, l1;
  };
  std::vector<Part> parts;
  std::vector<int64_t> ends{0};  // the steps at which a stream ends: the steps between two walk the same streams
  for (const auto& x : streams) {
    const auto [l0, l1] = core_rows(ceil_div(x.bytes, line), P, core, 1);
    parts.push_back({x, l0, l1});
    ends.push_back(l1 - l0);
  }
  if (!parts.empty()) {
    const Part& f = parts.front();
    const int64_t span = std::max<int64_t>(0, std::min(f.s.bytes, f.l1 * line) - f.l0 * line);
    c.units = span / unit_bytes, c.groups = 1;
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  // Sampled: each run of steps over the same streams a loop of lines (no line is touched twice),
  // its block the lines of a page. Exact: every step (not listed: a stream may have millions).
  // Only streams far larger than the LLC are sampled (the optimizer's, the gradient norm's): a
  // smaller one meets what the node's GEMM left in the LLC (an epilogue reading the output back),
  // which its skipped lines would change, and costs one step per line to walk.
  const int64_t llc_lines = s.llc.size_bytes / s.llc.line_bytes;
  const bool sampled = s.core_walk == CoreWalk::sampled && ends.back() * P > kStreamSampleLlcs * llc_lines;
  std::vector<Visit> visits;
  for (size_t i = 1; sampled && i < ends.size(); ++i)
    for (const Visit& v : loop_visits(ends[i] - ends[i - 1], true, page_period(s, line)))
      visits.push_back({ends[i - 1] + v.index, v.weight});
  const int64_t steps = sampled ? static_cast<int64_t>(visits.size()) : ends.back();
  int64_t k = 0;
  c.steps = [=](std::vector<CoreSeg>& o) mutable {
    if (k >= steps) return false;
    const Visit v = sampled ? visits[static_cast<size_t>(k)] : Visit{k, 1};
    for (const auto& p : parts) {
      if (p.l0 + v.index >= p.l1) continue;
      const int64_t off = (p.l0 + v.index) * line;
      o.push_back({p.s.op, p.s.base + off, std::min(line, p.s.bytes - off), p.s.write, v.weight});
    }
    ++k;
    return true;
  };
  return c;
}

}  // namespace bertlab::hw

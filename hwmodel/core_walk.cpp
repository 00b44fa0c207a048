#include "hwmodel/core_walk.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "base/error.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/rwma_tiling.h"

namespace bertlab::hw {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A GEMM tile as the core walks it: w_rows weight rows of w_bytes (RWMA: S strided rows of
// the row-major weight; BWMA: one contiguous S x S tile), then `rows` input rows and output
// rows, the output row lagging the input by the array's 2S - 1 rows of fill.
// weight: the tiles of the full schedule it stands for (1 but in a sampled walk's representatives).
struct Tile {
  uint64_t w, in, out;
  int64_t w_stride, w_rows, w_bytes, in_stride, out_stride, rows;
  int64_t weight = 1;
};

// S: the array; W: words per streamed row; word: bytes per word; row_bytes: bytes of a
// streamed input row.
CoreSteps tile_steps(std::vector<Tile> tiles, int64_t S, int64_t W, int64_t word, int64_t row_bytes, int a, int b,
                     int y) {
  size_t t = 0;
  int64_t phase = 0;
  return [=](std::vector<CoreSeg>& out) mutable {
    while (t < tiles.size()) {
      const Tile& x = tiles[t];
      if (phase < x.w_rows) {
        out.push_back({b, x.w + phase * x.w_stride, x.w_bytes, false, x.weight});
        ++phase;
        return true;
      }
      // Stream step i: input row i (issues i*W .. i*W + W - 1) and the outputs that become
      // valid during those issues (valid output o at issue o + L, L = W (2S - 1) - 1),
      // touched word range by word range in the output rows they fall in.
      const int64_t i = phase - x.w_rows, L = W * (2 * S - 1) - 1;
      const int64_t total = W * (x.rows + 2 * S - 1) - 1;
      if (i * W < total) {
        if (i < x.rows) out.push_back({a, x.in + i * x.in_stride, row_bytes, false, x.weight});
        const int64_t o0 = std::max<int64_t>(0, i * W - L), o1 = std::min(std::min((i + 1) * W, total) - L, x.rows * W);
        for (int64_t o = o0; o < o1;) {
          const int64_t r = o / W, end = std::min(o1, (r + 1) * W);
          out.push_back({y, x.out + r * x.out_stride + (o % W) * word, (end - o) * word, true, x.weight});
          o = end;
        }
        ++phase;
        return true;
      }
      ++t, phase = 0;
    }
    return false;
  };
}

// Sampled walks (SystemDesc::core_walk): iterations of a loop walked before its representatives.
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
    for (int64_t i = 0; i < block; ++i) v.push_back({first + i, n / block + (i < n % block ? 1 : 0)});
  }
  v.push_back({count - 1, 1});  // the edge
  return v;
}

// Iterations after which an operand advancing `advance` bytes per iteration has crossed a page
// (a power of two; 1 without a TLB), at most 64: the representative block of loop_visits.
int64_t page_period(const SystemDesc& s, int64_t advance) {
  if (s.tlb.entries <= 0 || advance <= 0) return 1;
  return std::clamp<int64_t>(std::bit_ceil(static_cast<uint64_t>((s.tlb.page_bytes + advance - 1) / advance)), 1, 64);
}

// An S x S weight tile is one contiguous block when the view stores S-column panels of
// S-element rows (BWMA's [N/S][K][S] tiles); otherwise S strided rows.
bool contiguous_tiles(const MatrixView& v, int64_t S) { return v.panel_width == S && v.row_stride == S * v.elem; }

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

CoreShare gemm_share(const GemmWork& w, const SystemDesc& s, int64_t core, int a, int b, int y) {
  const int64_t S = w.S, P = s.cores, e = w.instances.empty() ? 1 : w.instances.front()[0].elem;
  const int64_t word = s.array.bytes_per_issue, W = ceil_div(S * e, word);
  const int64_t M = w.m, K = w.k, N = w.n, KT = K / S, NT = N / S;
  const bool sampled = s.core_walk == CoreWalk::sampled;
  std::vector<Tile> tiles;
  CoreShare c;
  auto add = [&](Tile x, int64_t weight) {
    x.weight = weight;
    tiles.push_back(x);
    c.units += weight * W * x.rows;
    c.groups += weight;
    c.issues += weight * (S * W + W * (x.rows + 2 * S - 1) - 1);  // weight rows, streamed rows with fill and drain
  };
  for (const Visit& in : loop_visits(static_cast<int64_t>(w.instances.size()), sampled)) {
    const auto& [av, bv, yv] = w.instances[static_cast<size_t>(in.index)];
    const bool whole = contiguous_tiles(bv, S);
    auto tile = [&](int64_t kt, int64_t nt, int64_t row0, int64_t rows) {
      return Tile{bv.addr(kt * S, nt * S), av.addr(row0, kt * S), yv.addr(row0, nt * S), whole ? 0 : bv.row_stride,
                  whole ? 1 : S, whole ? S * S * e : S * e, av.row_stride, yv.row_stride, rows};
    };
    if (paper_bwma(w.arrangement, "the in-order core model (gemm_share)")) {
      const auto [p0, p1] = core_rows(NT, P, core, 1);
      // Per panel the weight panel and the output panel advance: the block spans a page of the smaller.
      const int64_t block = page_period(s, std::min(bv.panel_stride, yv.panel_stride));
      for (const Visit& np : loop_visits(p1 - p0, sampled, block))
        for (int64_t kt = 0; kt < KT; ++kt) add(tile(kt, p0 + np.index, 0, M), in.weight * np.weight);
      continue;
    }
    // TiC-SAT's RWMA tiling (rwma_tiling.h). A loop is sampled only when no loop around it
    // comes back to its data: skipped iterations would shrink the footprint between the visits
    // (an operand that overflows the LLC would hit). The weight chunks (kc, nc) come back for
    // every sequence group; the output chunks (nc) for every K chunk.
    const RwmaTiling t = rwma_tiling(M, K, N, S, w.block_rows);
    for (const Visit& gi : loop_visits(t.groups, sampled)) {
      const auto [b0, b1] = core_rows(t.blocks_in(gi.index), P, core, 1);
      for (const Visit& kc : loop_visits(t.kchunks, sampled && t.groups == 1))
        for (const Visit& nc : loop_visits(t.nchunks, sampled && t.groups == 1 && t.kchunks == 1))
          rwma_chunk_tiles(t, gi.index, kc.index, nc.index, b0, b1, [&](int64_t kt, int64_t nt, int64_t row0, int64_t rows) {
            add(tile(kt, nt, row0, rows), in.weight * gi.weight * kc.weight * nc.weight);
          });
    }
  }
  c.steps = tile_steps(std::move(tiles), S, W, word, S * e, a, b, y);
  return c;
}

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
  const bool sampled = s.core_walk == CoreWalk::sampled;
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

PageLru::PageLru(int64_t entries, int64_t ways)
    : sets_(ways == 0 ? 1 : entries / ways),
      ways_(ways == 0 ? entries : ways),
      page_(static_cast<size_t>(entries), kEmpty),
      prev_(static_cast<size_t>(entries), kNone),
      next_(static_cast<size_t>(entries), kNone),
      head_(static_cast<size_t>(sets_), kNone),
      used_(static_cast<size_t>(sets_), 0) {
  size_t table = 4;  // at most a quarter full: short probe runs
  while (table < static_cast<size_t>(4 * entries)) table *= 2;
  key_.assign(table, kEmpty);
  val_.assign(table, kNone);
  shift_ = 64 - std::countr_zero(table);
}

int32_t PageLru::find(uint64_t page) const {
  const size_t mask = key_.size() - 1;
  for (size_t i = slot_of(page);; i = (i + 1) & mask) {
    if (key_[i] == page) return val_[i];
    if (key_[i] == kEmpty) return kNone;
  }
}

void PageLru::table_insert(uint64_t page, int32_t e) {
  const size_t mask = key_.size() - 1;
  size_t i = slot_of(page);
  while (key_[i] != kEmpty) i = (i + 1) & mask;
  key_[i] = page, val_[i] = e;
}

// Linear probing's deletion by backward shift: later keys of the run move into the hole when
// their home slot does not lie cyclically between the hole and them.
void PageLru::table_erase(uint64_t page) {
  const size_t mask = key_.size() - 1;
  size_t i = slot_of(page);
  while (key_[i] != page) i = (i + 1) & mask;
  for (size_t j = (i + 1) & mask; key_[j] != kEmpty; j = (j + 1) & mask) {
    const size_t home = slot_of(key_[j]);
    if (((j - home) & mask) < ((j - i) & mask)) continue;  // home in (i, j]: stays
    key_[i] = key_[j], val_[i] = val_[j];
    i = j;
  }
  key_[i] = kEmpty, val_[i] = kNone;
}

void PageLru::unlink(int32_t e) {
  next_[prev_[e]] = next_[e];
  prev_[next_[e]] = prev_[e];
}

void PageLru::push_front(int64_t set, int32_t e) {  // e becomes the most recent of its set
  const int32_t h = head_[set];
  if (h == kNone) {
    prev_[e] = next_[e] = e;
  } else {
    prev_[e] = prev_[h], next_[e] = h;
    next_[prev_[h]] = e, prev_[h] = e;
  }
  head_[set] = e;
}

bool PageLru::access(uint64_t page) {
  if (page == last_) return true;
  last_ = page;
  const int64_t set = static_cast<int64_t>(page & static_cast<uint64_t>(sets_ - 1));  // modulo index (sets: a power of two)
  if (const int32_t e = find(page); e != kNone) {
    if (e != head_[set]) {  // most recent first
      unlink(e);
      push_front(set, e);
    }
    return true;
  }
  int32_t e;
  if (used_[set] < ways_) {
    e = static_cast<int32_t>(set * ways_ + used_[set]++);
  } else {  // evict the least recent: the ring's tail, before the head
    e = prev_[head_[set]];
    table_erase(page_[e]);
    if (e == head_[set]) head_[set] = kNone;  // a one-way set
    else unlink(e);
  }
  page_[e] = page;
  table_insert(page, e);
  push_front(set, e);
  return false;
}

CoreSim::CoreSim(const SystemDesc& s, const CoreStack& stack)
    : sys_(s), stack_(stack), sim_(s, s.cores), tlb_misses_(static_cast<size_t>(s.cores), 0) {
  if (s.tlb.entries > 0) tlb_.assign(static_cast<size_t>(s.cores), PageLru(s.tlb.entries, s.tlb.ways));
  for (const StackLine& l : stack_.lines) {
    check(l.l1_set >= 0 && l.l1_set < s.l1.sets(), "core model: stack line in L1 set {}: expected a set in 0..{}",
          l.l1_set, s.l1.sets() - 1);
    check(l.per_step > 0 && std::isfinite(l.per_step),
          "core model: stack line in L1 set {}: {} touches per step, expected a positive number", l.l1_set, l.per_step);
  }
}

void CoreSim::touch_stack(int64_t core, size_t i) {
  // Core c's stack lines lie in its private address range (c + 1) << 44 (as the lackey
  // replay maps each process's non-operand addresses), one in each given L1 set.
  sim_.access(core, stack_id_, (static_cast<uint64_t>(core + 1) << 44) + stack_.lines[i].l1_set * sys_.l1.line_bytes,
              sys_.l1.line_bytes, true);
}

// Every page the access touches is looked up in the core's TLB; a miss is a page walk.
void CoreSim::translate(int64_t core, uint64_t addr, int64_t bytes, int64_t weight) {
  if (tlb_.empty() || bytes <= 0) return;
  const uint64_t page = static_cast<uint64_t>(sys_.tlb.page_bytes);
  for (uint64_t p = addr / page; p <= (addr + bytes - 1) / page; ++p)
    if (!tlb_[core].access(p)) tlb_misses_[core] += weight;
}

std::vector<int64_t> CoreSim::run(std::vector<CoreShare>& shares) {
  const int64_t P = static_cast<int64_t>(shares.size());
  const size_t nstack = stack_.lines.size();
  const int64_t line = sys_.l1.line_bytes;
  // The stack stream: warm and dirty when the first kernel starts (the kernel's frames were
  // written by its caller), so touched once before the counts restart. Then a line of at most
  // one touch per step is touched after the steps where the running sum of its rate passes a
  // whole number; a line of more than one touch per step (the kernel's locals between the
  // step's operand accesses: K transpose's 4 x 4 blocks, a layernorm pass) after the step's
  // line accesses where the running sum of rate / accesses passes a whole number, at most
  // once after each (the measured touches per step, spread evenly over the step's accesses).
  if (nstack > 0 && stack_id_ < 0) {
    stack_id_ = sim_.operand("stack");
    due_.assign(static_cast<size_t>(P) * nstack, 0.0);
    for (int64_t core = 0; core < P; ++core)
      for (size_t i = 0; i < nstack; ++i) touch_stack(core, i);
    sim_.reset_counts();
  }
  const bool within = std::any_of(stack_.lines.begin(), stack_.lines.end(), [](const StackLine& l) { return l.per_step > 1; });
  auto stack_step = [&](int64_t core) {  // after a step: the lines of at most one touch per step
    for (size_t i = 0; i < nstack; ++i) {
      if (stack_.lines[i].per_step > 1) continue;
      double& d = due_[core * nstack + i];
      d += stack_.lines[i].per_step;
      if (d < 1) continue;
      d -= 1;
      touch_stack(core, i);
    }
  };
  auto stack_between = [&](int64_t core, int64_t accesses) {  // after one of a step's line accesses
    for (size_t i = 0; i < nstack; ++i) {
      if (stack_.lines[i].per_step <= 1) continue;
      double& d = due_[core * nstack + i];
      d += std::min(1.0, stack_.lines[i].per_step / static_cast<double>(accesses));
      if (d < 1) continue;
      d -= 1;
      touch_stack(core, i);
    }
  };
  // Equal-speed cores: one step each per round.
  std::vector<CoreSeg> buf;
  std::vector<bool> live(P, true);
  std::vector<int64_t> steps(P, 0);
  for (int64_t n = P; n > 0;) {
    n = 0;
    for (int64_t core = 0; core < P; ++core) {
      if (!live[core]) continue;
      buf.clear();
      live[core] = shares[core].steps(buf);
      for (const auto& g : buf) translate(core, g.addr, g.bytes, g.weight);
      if (!within) {
        for (const auto& g : buf) sim_.access(core, g.op, g.addr, g.bytes, g.write, g.weight);
      } else {  // line by line, the locals of rates above one touch per step between them
        int64_t accesses = 0;
        for (const auto& g : buf)
          if (g.bytes > 0) accesses += static_cast<int64_t>((g.addr + g.bytes - 1) / line - g.addr / line + 1);
        for (const auto& g : buf)
          for (uint64_t at = g.addr; at < g.addr + g.bytes;) {
            const uint64_t end = std::min(g.addr + g.bytes, (at / line + 1) * line);
            sim_.access(core, g.op, at, static_cast<int64_t>(end - at), g.write, g.weight);
            stack_between(core, accesses);
            at = end;
          }
      }
      if (!live[core]) continue;
      ++steps[core];
      if (nstack > 0) stack_step(core);  // the kernel's locals, at their measured rates
      n += 1;
    }
  }
  return steps;
}

}  // namespace bertlab::hw

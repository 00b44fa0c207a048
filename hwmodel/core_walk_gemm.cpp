// The core model's GEMM schedule (core_walk.h gemm_share): TiC-SAT's tiles under BWMA and RWMA,
// walked exactly or by the split walk (an LLC pass over every tile, an L1 pass over
// representative blocks). The other schedules (transposes, row ops, line streams) are in
// core_walk.cpp, the simulator driver in core_sim.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/core_walk.h"
#include "hwmodel/encoder_layer.h"
#include "hwmodel/rwma_tiling.h"

namespace bertlab::hw {

namespace {

// A GEMM tile as the core walks it: w_rows weight rows of w_bytes (RWMA: S strided rows of
// the row-major weight; BWMA: one contiguous S x S tile), then `rows` input rows and output
// rows, the output row lagging the input by the array's 2S - 1 rows of fill.
struct Tile {
  uint64_t w, in, out;
  int64_t w_stride, w_rows, w_bytes, in_stride, out_stride, rows;
};
// A core's tiles as stored: a GEMM of seq 128 has millions (BERT-large's vocabulary projection at
// S = 4), so each keeps its addresses and rows, and the strides and weight rows it shares with
// the other tiles of its product are kept once.
class Tiles {
 public:
  int64_t size() const { return static_cast<int64_t>(tiles_.size()); }
  Tile operator[](int64_t i) const {
    const Packed& p = tiles_[static_cast<size_t>(i)];
    const Tile& g = geom_[p.geom];
    return Tile{p.w, p.in, p.out, g.w_stride, g.w_rows, g.w_bytes, g.in_stride, g.out_stride, p.rows};
  }
  // The tile's shape (rows, strides): tiles of one shape cost alike.
  uint64_t shape_of(int64_t i) const {
    const Packed& p = tiles_[static_cast<size_t>(i)];
    return static_cast<uint64_t>(p.rows) << 32 | p.geom;
  }
  void reserve(size_t n) { tiles_.reserve(n); }
  void push_back(const Tile& x) {
    if (geom_.empty() || !same_geometry(geom_.back(), x)) geom_.push_back(x);
    tiles_.push_back({x.w, x.in, x.out, static_cast<int32_t>(x.rows), static_cast<uint32_t>(geom_.size() - 1)});
  }

 private:
  struct Packed {
    uint64_t w, in, out;
    int32_t rows;
    uint32_t geom;
  };
  static bool same_geometry(const Tile& a, const Tile& b) {
    return a.w_stride == b.w_stride && a.w_rows == b.w_rows && a.w_bytes == b.w_bytes && a.in_stride == b.in_stride &&
           a.out_stride == b.out_stride;
  }
  std::vector<Packed> tiles_;
  std::vector<Tile> geom_;
};

// Steps of one tile walked exactly: phase 0 .. w_rows - 1 the weight rows, then stream step i:
// input row i (issues i*W .. i*W + W - 1) and the outputs that become valid during those issues
// (valid output o at issue o + L, L = W (2S - 1) - 1), touched word range by word range in the
// output rows they fall in. Appends one step's accesses; false when the tile is done.
// S: the array; W: words per streamed row; word: bytes per word; row_bytes: bytes of a
// streamed input row.
struct TileShape {
  int64_t S, W, word, row_bytes;
  int a, b, y;
};
bool tile_step(const Tile& x, const TileShape& g, int64_t phase, int64_t weight, CacheLevels levels,
               std::vector<CoreSeg>& out) {
  const int64_t S = g.S, W = g.W, word = g.word;
  if (phase < x.w_rows) {
    out.push_back({g.b, x.w + phase * x.w_stride, x.w_bytes, false, weight, levels});
    return true;
  }
  const int64_t i = phase - x.w_rows, L = W * (2 * S - 1) - 1;
  const int64_t total = W * (x.rows + 2 * S - 1) - 1;
  if (i * W >= total) return false;
  if (i < x.rows) out.push_back({g.a, x.in + i * x.in_stride, g.row_bytes, false, weight, levels});
  const int64_t o0 = std::max<int64_t>(0, i * W - L), o1 = std::min(std::min((i + 1) * W, total) - L, x.rows * W);
  for (int64_t o = o0; o < o1;) {
    const int64_t r = o / W, end = std::min(o1, (r + 1) * W);
    out.push_back({g.y, x.out + r * x.out_stride + (o % W) * word, (end - o) * word, true, weight, levels});
    o = end;
  }
  return true;
}

// The three operand rectangles a tile touches (weight rows, input rows, output rows): rows of
// `bytes` at `stride`.
struct Rect {
  int op;
  uint64_t addr;
  int64_t stride, rows, bytes;
  bool write;
  bool contiguous() const { return rows <= 1 || stride == bytes; }
};
std::array<Rect, 3> tile_rects(const Tile& x, const TileShape& g) {
  return {Rect{g.b, x.w, x.w_stride, x.w_rows, x.w_bytes, false}, Rect{g.a, x.in, x.in_stride, x.rows, g.row_bytes, false},
          Rect{g.y, x.out, x.out_stride, x.rows, g.W * g.word, true}};
}
// Blocks of `block` bytes (lines, pages) a rectangle spans (a strided one: its first row's, per row).
int64_t rect_blocks(const Rect& r, int64_t block) {
  if (r.rows <= 0 || r.bytes <= 0) return 0;
  const int64_t per_row = static_cast<int64_t>((r.addr + r.bytes - 1) / block - r.addr / block + 1);
  if (r.contiguous()) return static_cast<int64_t>((r.addr + r.rows * r.bytes - 1) / block - r.addr / block + 1);
  return r.stride >= block ? r.rows * per_row : std::min(r.rows * per_row, (r.rows * r.stride) / block + per_row);
}

// A window of the LLC pass: consecutive tiles of one sequence block whose operand rows, taken
// together, are three rectangles (RWMA's L1 group: kt1 x nt1 tiles over the same rows). When
// no LLC set gets more than half its ways from the window's lines, walking them once each (the
// weight rows, then the input and output rows side by side, the output rows as writes) gives
// the LLC what the tiles' accesses give it: an LRU cache evicts a line of the window only after
// the set's lines older than the window, so every line misses at most once (at its first
// touch), the victims are the same old lines and the window leaves its lines as the most
// recent. `steps`: the schedule steps of its tiles (the spans of its pieces).
struct Window {
  int64_t first, count, steps;
  std::array<Rect, 3> rects;
};

// RWMA's L1 groups as gemm_share meets their tiles, then the LLC pass's windows among them
// (take): the groups of at least two tiles whose operands are row-major (their tiles' rows
// together are rectangles) and whose lines fill at most half of every LLC set's ways.
class WindowBuilder {
 public:
  // Tile `index` of product `inst`: K tile kt, N tile nt, rows [row0, row0 + rows), in L1 group
  // `group` (a number that tells the product's groups apart), `steps` schedule steps.
  void add(int64_t index, int64_t inst, int64_t group, int64_t kt, int64_t nt, int64_t row0, int64_t rows,
           int64_t steps) {
    if (!groups_.empty() && groups_.back().inst == inst && groups_.back().group == group) {
      Group& q = groups_.back();
      q.kt0 = std::min(q.kt0, kt), q.kt1 = std::max(q.kt1, kt), q.nt0 = std::min(q.nt0, nt), q.nt1 = std::max(q.nt1, nt);
      ++q.count, q.steps += steps;
      return;
    }
    groups_.push_back({index, 1, steps, inst, group, kt, kt, nt, nt, row0, rows});
  }
  std::vector<Window> take(const GemmWork& w, const TileShape& g, const CacheDesc& llc) const {
    std::vector<Window> v;
    const int64_t S = g.S, e = g.row_bytes / S;
    const SetIndex set_of(llc);
    analytic_detail::SetTally tally(set_of, set_of.sets);
    const auto half = static_cast<int32_t>(llc.ways / 2);
    std::vector<Sweep> sweeps;
    for (const Group& q : groups_) {
      const auto& [a, b, y] = w.instances[static_cast<size_t>(q.inst)];
      const bool row_major = a.panel_width == 0 && b.panel_width == 0 && y.panel_width == 0 && !a.address &&
                             !b.address && !y.address;
      if (q.count < 2 || !row_major) continue;
      const std::array<Rect, 3> r{
          Rect{g.b, b.addr(q.kt0 * S, q.nt0 * S), b.row_stride, (q.kt1 - q.kt0 + 1) * S, (q.nt1 - q.nt0 + 1) * S * e, false},
          Rect{g.a, a.addr(q.row0, q.kt0 * S), a.row_stride, q.rows, (q.kt1 - q.kt0 + 1) * S * e, false},
          Rect{g.y, y.addr(q.row0, q.nt0 * S), y.row_stride, q.rows, (q.nt1 - q.nt0) * S * e + g.W * g.word, true}};
      sweeps.clear();
      for (const Rect& x : r) sweeps.push_back({x.addr, x.rows, x.stride, x.bytes});
      if (analytic_detail::most_lines_in_a_set(sweeps, llc.line_bytes, tally, half) <= half)
        v.push_back({q.first, q.count, q.steps, r});
    }
    return v;
  }

 private:
  struct Group {
    int64_t first, count, steps, inst, group, kt0, kt1, nt0, nt1, row0, rows;
  };
  std::vector<Group> groups_;
};

// A BWMA product whose input A stays in the LLC through a core's rounds (a round: one output
// panel, every k-tile's weight tile and input panel streamed into it). Every round reads all of
// A, so each core touches each line of A again within a round. When no LLC set gets more than
// its ways from A's lines together with the weight and output panels that all cores touch in two
// consecutive rounds, fewer than `ways` other lines of a line's set come between two touches of
// it, so an LRU LLC never evicts a line of A once it is in: after the first round every touch of
// A hits. The LLC pass then leaves A out of the core's tiles [from, last) (its rounds but the
// first and the last), and touches it with weight 0 in [last, end) (the last round). The
// simulated LLC, not seeing A's touches in between, lets A's lines age and evicts them in place
// of older weight and output lines: no miss is lost (A's touches there hit), and the last round
// brings A back in among that round's weight and output lines, as the product leaves the LLC for
// what follows it (an epilogue reading the output back). Without that last round, bert-base
// inference at seq 512 had 26.6% too few DRAM bytes on a node (the output panels A's place had
// kept); with A touched with weight 0 after the last round instead, 2.3% too many.
struct InputStays {
  int64_t from, last, end;
};
bool bwma_input_stays(const MatrixView& av, const MatrixView& bv, const MatrixView& yv, int64_t M, int64_t K, int64_t NT,
                      int64_t S, int64_t P, const CacheDesc& llc) {
  if (!contiguous_tiles(av, S) || !contiguous_tiles(bv, S) || !contiguous_tiles(yv, S) || av.address || bv.address ||
      yv.address)
    return false;
  const SetIndex set_of(llc);
  const int64_t L = llc.line_bytes, KT = K / S;
  std::vector<int32_t> a(static_cast<size_t>(set_of.sets), 0), extra(a.size(), 0);
  int64_t last = -1;
  for (int64_t kt = 0; kt < KT; ++kt) {  // A's panels: M rows of S elements each, contiguous
    const uint64_t at = av.addr(0, kt * S);
    const auto lo = static_cast<int64_t>(at / L), hi = static_cast<int64_t>((at + M * S * av.elem - 1) / L);
    for (int64_t l = std::max(lo, last + 1); l <= hi; ++l)
      if (++a[static_cast<size_t>(set_of(l))] > llc.ways) return false;
    last = hi;
  }
  std::vector<std::pair<int64_t, int64_t>> cores;  // each core's output panels [p0, p1)
  int64_t rounds = 0;
  for (int64_t c = 0; c < P; ++c) {
    cores.push_back(core_rows(NT, P, c, 1));
    rounds = std::max(rounds, cores.back().second - cores.back().first);
  }
  std::vector<int64_t> touched;
  for (int64_t r = 0; r < rounds; ++r) {
    for (int64_t rr = r; rr < std::min(rounds, r + 2); ++rr)
      for (const auto& [p0, p1] : cores) {
        if (p0 + rr >= p1) continue;
        const int64_t np = p0 + rr;
        // The weight panel (K x S, the k-tiles' S x S tiles one after another) and the output panel.
        for (const auto& [at, bytes] : {std::pair<uint64_t, int64_t>{bv.addr(0, np * S), K * S * bv.elem},
                                        std::pair<uint64_t, int64_t>{yv.addr(0, np * S), M * S * yv.elem}})
          for (auto l = static_cast<int64_t>(at / L); l <= static_cast<int64_t>((at + bytes - 1) / L); ++l) {
            const auto st = static_cast<size_t>(set_of(l));
            if (extra[st]++ == 0) touched.push_back(static_cast<int64_t>(st));
            if (a[st] + extra[st] > llc.ways) return false;
          }
      }
    analytic_detail::clear_tally(extra, touched);
  }
  return true;
}

// The split walk of a sampled GEMM (gemm_share). The simulator's L1s and LLC keep separate LRU
// states over the same accesses (the LLC sees every access, L1 hits too: tracesim.h), so they can
// be walked apart, each at the cost its state needs:
// - the LLC pass (CacheLevels::llc_only) touches every tile's lines, a line's worth of rows at a
//   time instead of word by word, in pieces interleaved across the cores as their rows are, with
//   weight 1: the LLC and DRAM counts (misses, write-backs, the row mix) come from the whole
//   schedule, so no operand's reuse across outer loops is lost (what the sampling of outer loops
//   before it could not do: a sampled loop shrank the footprint between two visits);
// - the L1 pass (CacheLevels::l1_only) walks representative blocks of tiles exactly, their counts
//   (L1 misses, page walks) weighted by the tiles they stand for: an L1 of 32 KB and a TLB of 64
//   pages hold only recent lines and pages, which the tiles just before a block restore (walked
//   with weight 0 until they cover twice the L1's lines and the TLB's entries, at most
//   kMaxWarmTiles tiles; the part beyond the L1's lines as rectangles, not step by step).
// The instruction model's units, groups and array issues are counted over every tile.
//
// The blocks: the first and last tiles (the cold start; the state the GEMM leaves) and
// kTileStrata strata (fewer when the tiles are few, none below kMinStrata: then the GEMM is
// walked exactly) per class of tiles of one shape, each a block of whole units of at least
// kBlockSteps steps at a place that moves through its stratum by the golden ratio (a fixed place
// would meet an inner loop always at the same point). A unit is one tile under BWMA, and under
// RWMA a sweep of a chunk's N columns (gemm_share), whose tiles' lines fall in every relative
// place among the L1's sets that the chunk has.
constexpr int64_t kTileStrata = 16;
constexpr int64_t kMinStrata = 4;
constexpr int64_t kBlockSteps = 4096;
constexpr double kGoldenFraction = 0.6180339887498949;
// Split only when the L1 pass walks at most half of the steps: its steps skip the LLC and the
// LLC pass walks each tile's lines at most once, so even then the split costs less than the
// exact walk (BERT-large training at seq 128, 24 configurations: 49.6 s of CPU against 83-111 s at
// a quarter, since BERT-large's 1024 x 1024 GEMMs at S = 4 walked exactly there). At a saving of 1
// (split whenever the blocks do not cover the GEMM) the L1 and LLC errors grew to 34% and 7.5%
// on bert-base training nodes.
constexpr int64_t kSplitMinSaving = 2;
// The LLC pass touches each rectangle's lines once per tile, skipping a rectangle (the same
// operand, lines of its first row, stride and rows) still held in a direct-mapped table of
// kRecentRects entries (a hash of its first line and operand) when fewer than 1/kRefreshFraction
// of the LLC's lines were touched since by all cores (each core counts its own, divided by the
// cores): the tiles of an L1 group share input and output lines, and a skipped touch must be one
// that would have hit. The fraction is small because a hashed LLC can evict a line early under
// power-of-two-like strides (RWMA rows of 16392 bytes: with an eighth of the LLC, 4x too few LLC
// misses; with 1/64, the exact count, tests/test_hwmodel_core_sampling.cpp). A piece of a tile:
// kLlcPieceLines lines of its input rows and of its output rows.
constexpr size_t kRecentRects = 32;
constexpr int64_t kLlcPieceLines = 32;
constexpr int64_t kMaxWarmTiles = 1024;
constexpr int64_t kRefreshFraction = 64;

// A tile of the L1 pass: walked exactly, or (coarse: a warm-up tile before those that cover the
// L1's lines) as its rectangles, one step, with weight 0.
struct TileVisit {
  int64_t tile, weight;
  bool coarse;
};

int64_t tile_steps_count(const Tile& x, int64_t S) { return x.w_rows + x.rows + 2 * S - 1; }

// A set of line or page numbers for the warm-up's count: open addressing, cleared in O(1) by a
// generation number; it stops growing at half its slots (the warm-up targets are far below).
class CountSet {
 public:
  void clear() { ++gen_, size_ = 0; }
  int64_t size() const { return size_; }
  void insert(uint64_t key) {
    if (size_ >= static_cast<int64_t>(kSlots / 2)) return;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> (64 - kBits);; i = (i + 1) & (kSlots - 1)) {
      if (gen_of_[i] != gen_) {
        gen_of_[i] = gen_, key_[i] = key, ++size_;
        return;
      }
      if (key_[i] == key) return;
    }
  }

 private:
  static constexpr int kBits = 13;
  static constexpr size_t kSlots = size_t{1} << kBits;
  std::vector<uint64_t> key_ = std::vector<uint64_t>(kSlots);
  std::vector<uint32_t> gen_of_ = std::vector<uint32_t>(kSlots, 0);
  uint32_t gen_ = 0;
  int64_t size_ = 0;
};

// The L1 pass's visits (empty: the GEMM is walked exactly, in one pass).
std::vector<TileVisit> l1_plan(const Tiles& t, const TileShape& g, const SystemDesc& s, int64_t unit) {
  std::vector<TileVisit> v;
  const int64_t N = t.size();
  int64_t total = 0;
  for (int64_t i = 0; i < N; ++i) total += tile_steps_count(t[i], g.S);
  if (N == 0 || total == 0) return v;
  // A block: whole units of `unit` tiles, at least kBlockSteps steps.
  const int64_t per_unit_steps = std::max<int64_t>(1, total / N * unit);
  const int64_t B = unit * std::max<int64_t>(1, ceil_div(kBlockSteps, per_unit_steps));
  const int64_t strata = std::min<int64_t>(kTileStrata, N / (kSplitMinSaving * B) - 2);
  if (strata < kMinStrata) return v;

  // The representatives: the first and last B tiles (the cold start; the state the GEMM leaves),
  // and strata over the tiles between them, per class of tiles of one shape (rows and strides:
  // a partial sequence block's tiles have few rows and cost a fraction of the others, so a block
  // stands only for tiles of its own shape), each class given strata in proportion to its steps.
  struct Block {
    int64_t start, len, stands_for;
  };
  std::vector<Block> blocks{{0, B, B}, {N - B, B, B}};
  struct Run {
    int64_t start, len;
  };
  std::map<uint64_t, std::vector<Run>> classes;
  std::map<uint64_t, int64_t> class_steps;
  for (int64_t i = B; i < N - B; ++i) {
    auto& runs = classes[t.shape_of(i)];
    class_steps[t.shape_of(i)] += tile_steps_count(t[i], g.S);
    if (!runs.empty() && runs.back().start + runs.back().len == i) ++runs.back().len;
    else runs.push_back({i, 1});
  }
  for (const auto& [key, runs] : classes) {
    int64_t n_class = 0;
    for (const Run& r : runs) n_class += r.len;
    const int64_t class_strata = std::clamp<int64_t>(
        static_cast<int64_t>(std::llround(static_cast<double>(strata * class_steps[key]) / static_cast<double>(total))), 1,
        strata);
    size_t run = 0;
    int64_t before = 0;  // class tiles in the runs before `run`
    for (int64_t k = 0; k < class_strata; ++k) {
      const int64_t s0 = n_class * k / class_strata, n = n_class * (k + 1) / class_strata - s0, nb = std::min(B, n);
      if (n <= 0) continue;
      const double place = std::fmod(static_cast<double>(k + 1) * kGoldenFraction, 1.0);
      // A place in the class, at a unit's start.
      const int64_t p = std::max<int64_t>(s0, (s0 + static_cast<int64_t>(place * static_cast<double>(n - nb))) / unit * unit);
      while (before + runs[run].len <= p) before += runs[run++].len;
      const int64_t off = p - before;
      blocks.push_back({runs[run].start + off, std::min(nb, runs[run].len - off), n});
    }
  }
  std::sort(blocks.begin(), blocks.end(), [](const Block& x, const Block& y) { return x.start < y.start; });

  const int64_t line = s.l1.line_bytes, l1_lines = s.l1.size_bytes / line;
  const int64_t warm_lines = 2 * l1_lines;
  // The TLB's state is its last `entries` distinct pages when fully associative; a set-associative
  // one is given twice as many, as the L1.
  const int64_t tlb_pages = s.tlb.entries > 0 ? (s.tlb.ways == 0 ? 1 : 2) * s.tlb.entries : 0;
  int64_t end = 0;  // the tiles before it are in the plan
  CountSet lines, pages;
  for (Block blk : blocks) {
    if (blk.start < end) {  // overlaps the block before: its own tiles from there
      blk.len -= end - blk.start, blk.start = end;
      if (blk.len <= 0) continue;
    }
    const int64_t b = blk.start;
    int64_t e = b;
    lines.clear(), pages.clear();
    int64_t exact_from = -1;  // the L1's lines are covered from this tile on: walked exactly
    while (e > end && b - e < kMaxWarmTiles && (lines.size() < warm_lines || pages.size() < tlb_pages)) {
      if (exact_from < 0 && lines.size() >= warm_lines) exact_from = e;
      --e;
      for (const Rect& r : tile_rects(t[e], g)) {
        if (r.rows <= 0 || r.bytes <= 0) continue;
        const bool more_lines = lines.size() < warm_lines;
        for (int64_t k = 0; k < (r.contiguous() ? 1 : r.rows); ++k) {
          const uint64_t at = r.addr + static_cast<uint64_t>(k * r.stride);
          const uint64_t last = at + static_cast<uint64_t>(r.contiguous() ? r.rows * r.bytes : r.bytes) - 1;
          if (more_lines)
            for (uint64_t l = at / line; l <= last / line; ++l) lines.insert(l);
          if (tlb_pages > 0)
            for (uint64_t q = at / s.tlb.page_bytes; q <= last / s.tlb.page_bytes; ++q) pages.insert(q);
        }
      }
    }
    if (exact_from < 0) exact_from = e;
    for (int64_t i = e; i < b; ++i) v.push_back({i, 0, i < exact_from});
    for (int64_t i = 0; i < blk.len; ++i)
      v.push_back({b + i, blk.stands_for / blk.len + (i < blk.stands_for % blk.len ? 1 : 0), false});
    end = b + blk.len;
  }
  int64_t walked = 0;
  for (const TileVisit& x : v) walked += x.coarse ? 1 : tile_steps_count(t[x.tile], g.S);
  if (walked * kSplitMinSaving > total) v.clear();
  return v;
}

// A core's GEMM schedule as steps: every tile exactly through both levels, or (a non-empty plan)
// the LLC pass over every tile, one step per tile, then the plan's tiles through the L1 and TLB.
class TileWalk {
 public:
  // l1_elsewhere: the LLC pass only (CoreShare::l1_as: another core's L1 pass counts for this one).
  TileWalk(std::shared_ptr<const Tiles> tiles, std::vector<TileVisit> plan, std::vector<Window> windows,
           std::vector<InputStays> stays, TileShape g, const CacheDesc& llc, int64_t cores, bool l1_elsewhere)
      : tiles_(std::move(tiles)),
        plan_(std::move(plan)),
        l1_elsewhere_(l1_elsewhere),
        windows_(std::make_shared<const std::vector<Window>>(std::move(windows))),
        stays_(std::make_shared<const std::vector<InputStays>>(std::move(stays))),
        g_(g),
        line_(llc.line_bytes),
        // Rows whose input (and output) bytes fill a line: every tile of the GEMM streams rows alike.
        rows_per_line_(std::max<int64_t>(1, line_ / std::max<int64_t>(1, std::max(g.row_bytes, g.W * g.word)))),
        refresh_(std::max<int64_t>(1, llc.size_bytes / llc.line_bytes / kRefreshFraction / cores)) {}

  bool operator()(std::vector<CoreSeg>& out) {
    const auto& t = *tiles_;
    if (plan_.empty() && !l1_elsewhere_) {  // exact: every tile once, through both levels
      while (i_ < t.size()) {
        if (tile_step(t[i_], g_, phase_++, 1, CacheLevels::both, out)) return true;
        ++i_, phase_ = 0;
      }
      return false;
    }
    // The LLC pass: a piece of a window (window_piece) or of a tile per step (its weight rows
    // with the first piece, then at most kLlcPieceLines lines of its input and output rows),
    // spanning the piece's schedule steps and those of pieces before it that touched nothing new.
    for (int64_t span = 0; llc_ && i_ < t.size();) {
      while (s_ < stays_->size() && (*stays_)[s_].end <= i_) ++s_;
      if (row_ == 0 && w_ < windows_->size() && (*windows_)[w_].first == i_) return window_piece(span, out);
      const Tile x = t[i_];
      const size_t first = out.size();
      if (row_ == 0) {
        span += x.w_rows;
        start_tile(x, out);
      }
      const int64_t n = std::min(kLlcPieceLines * rows_per_line_, x.rows - row_);
      llc_rows(x, row_, n, out);
      span += n;
      row_ += n;
      if (row_ >= x.rows) span += 2 * g_.S - 1, row_ = 0, ++i_;  // the array's fill and drain
      if (out.size() > first) {
        out[first].span = static_cast<int32_t>(std::min<int64_t>(span, std::numeric_limits<int32_t>::max()));
        return true;
      }
    }
    if (llc_) llc_ = false, i_ = 0, phase_ = 0;
    if (l1_elsewhere_) return false;
    while (i_ < static_cast<int64_t>(plan_.size())) {
      const TileVisit& v = plan_[static_cast<size_t>(i_)];
      if (v.coarse) {
        for (const Rect& r : tile_rects(t[v.tile], g_)) emit(r, 0, CacheLevels::l1_only, out);
        ++i_, phase_ = 0, run_ = 0;
        return true;
      }
      if (phase_ == 0) {
        // A tile of the same lines as the tile before it, itself such a tile: its counts are that
        // tile's, and the L1 and TLB states stay as they are (SegKind::repeat).
        const TileVisit* prev = i_ > 0 ? &plan_[static_cast<size_t>(i_ - 1)] : nullptr;
        const bool same = prev && !prev->coarse && prev->tile + 1 == v.tile && same_lines(t[prev->tile], t[v.tile]);
        run_ = same ? run_ + 1 : 1;
        if (run_ >= 3) {
          out.push_back({g_.a, 0, 0, false, v.weight, CacheLevels::l1_only, 1, SegKind::repeat});
          ++i_;
          return true;
        }
        out.push_back({g_.a, 0, 0, false, v.weight, CacheLevels::l1_only, 1, SegKind::tile});
      }
      if (tile_step(t[v.tile], g_, phase_++, v.weight, CacheLevels::l1_only, out)) return true;
      ++i_, phase_ = 0;
    }
    return false;
  }

 private:
  struct Recent {
    int op = -1;
    uint64_t first = 0, last = 0;
    int64_t stride = 0, rows = 0, stamp = 0;
  };
  // Whether tiles x and z touch the same lines in the same order: the same shape, and every row
  // of each operand in the same lines, within one line where the two rows start apart (an
  // output row is touched in word ranges).
  bool same_lines(const Tile& x, const Tile& z) const {
    if (x.rows != z.rows || x.w_rows != z.w_rows || x.w_bytes != z.w_bytes || x.w_stride != z.w_stride ||
        x.in_stride != z.in_stride || x.out_stride != z.out_stride)
      return false;
    const auto xr = tile_rects(x, g_), zr = tile_rects(z, g_);
    for (size_t i = 0; i < xr.size(); ++i) {
      const Rect &p = xr[i], &q = zr[i];
      if (p.addr == q.addr || p.rows <= 0 || p.bytes <= 0) continue;
      for (int64_t k = 0; k < p.rows; ++k) {
        const uint64_t a = p.addr + static_cast<uint64_t>(k * p.stride), b = q.addr + static_cast<uint64_t>(k * q.stride);
        const uint64_t la = a / line_, lb = b / line_;
        if (la != lb || (a + p.bytes - 1) / line_ != la || (b + q.bytes - 1) / line_ != lb) return false;
      }
    }
    return true;
  }
  // A piece of window w_ (Window): its weight rows with the first piece, then at most
  // kLlcPieceLines lines of its input and output rows, side by side a row at a time, spanning
  // the piece's share of the window's steps (and `span`, those of skipped pieces before it).
  bool window_piece(int64_t span, std::vector<CoreSeg>& out) {
    const Window& wd = (*windows_)[w_];
    const Rect &in = wd.rects[1], &y = wd.rects[2];
    const size_t first = out.size();
    if (wrow_ == 0) emit(wd.rects[0], 1, CacheLevels::llc_only, out);
    const int64_t per_row = rect_blocks(Rect{in.op, in.addr, in.stride, 1, in.bytes, false}, line_) +
                            rect_blocks(Rect{y.op, y.addr, y.stride, 1, y.bytes, true}, line_);
    const int64_t n = std::min(std::max<int64_t>(1, 2 * kLlcPieceLines / std::max<int64_t>(1, per_row)), in.rows - wrow_);
    for (int64_t r = wrow_; r < wrow_ + n; ++r) {
      emit(Rect{in.op, in.addr + static_cast<uint64_t>(r * in.stride), in.stride, 1, in.bytes, false}, 1,
           CacheLevels::llc_only, out);
      emit(Rect{y.op, y.addr + static_cast<uint64_t>(r * y.stride), y.stride, 1, y.bytes, true}, 1, CacheLevels::llc_only,
           out);
    }
    span += wd.steps * (wrow_ + n) / in.rows - wd.steps * wrow_ / in.rows;
    wrow_ += n;
    if (wrow_ >= in.rows) wrow_ = 0, i_ = wd.first + wd.count, ++w_;
    out[first].span = static_cast<int32_t>(std::clamp<int64_t>(span, 1, std::numeric_limits<int32_t>::max()));
    return true;
  }
  // The LLC pass's accesses of a tile: the weight rows, then the input and output rows side by
  // side, a line's worth of rows of each at a time (as the stream reads and writes them: a tile
  // of a long GEMM can be a sizeable part of the LLC, where the order of the two decides which
  // of them the LLC keeps), in pieces, so that the cores' pieces interleave as their rows do.
  // Rectangles touched recently are left out (kRecentRects).
  void start_tile(const Tile& x, std::vector<CoreSeg>& out) {
    const auto rects = tile_rects(x, g_);
    for (size_t i = 0; i < rects.size(); ++i) {
      const Rect& r = rects[i];
      fresh_[i] = false;
      if (r.rows <= 0 || r.bytes <= 0) continue;
      if (i == 1 && s_ < stays_->size() && i_ >= (*stays_)[s_].from && i_ < (*stays_)[s_].last)
        continue;  // A stays in the LLC (InputStays)
      const Recent key{r.op, r.addr / line_, (r.addr + r.bytes - 1) / line_, r.stride, r.rows, touched_};
      Recent& q = recent_[static_cast<size_t>((key.first * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(key.op)) >> 59)];
      if (q.op == key.op && q.first == key.first && q.last == key.last && q.stride == key.stride && q.rows == key.rows &&
          touched_ - q.stamp < refresh_)
        continue;
      q = key;
      fresh_[i] = true;
      touched_ += rect_blocks(r, line_);
    }
    if (fresh_[0]) emit(rects[0], 1, CacheLevels::llc_only, out);
  }
  void llc_rows(const Tile& x, int64_t r0, int64_t n, std::vector<CoreSeg>& out) const {
    if (!fresh_[1] && !fresh_[2]) return;
    const auto rects = tile_rects(x, g_);
    const Rect &in = rects[1], &y = rects[2];
    const int64_t chunk = rows_per_line_;
    for (int64_t r = r0; r < r0 + n; r += chunk) {
      const int64_t m = std::min(chunk, r0 + n - r);
      if (fresh_[1])
        emit(Rect{in.op, in.addr + static_cast<uint64_t>(r * in.stride), in.stride, m, in.bytes, in.write},
             input_weight(), CacheLevels::llc_only, out);
      if (fresh_[2]) emit(Rect{y.op, y.addr + static_cast<uint64_t>(r * y.stride), y.stride, m, y.bytes, y.write}, 1,
                          CacheLevels::llc_only, out);
    }
  }

  // The weight of the current tile's input touches: 0 in the last round of a product whose A stays
  // in the LLC (InputStays), else 1.
  int64_t input_weight() const { return s_ < stays_->size() && i_ >= (*stays_)[s_].last ? 0 : 1; }

  static void emit(const Rect& r, int64_t weight, CacheLevels levels, std::vector<CoreSeg>& out) {
    if (r.rows <= 0 || r.bytes <= 0) return;
    if (r.contiguous()) {
      out.push_back({r.op, r.addr, r.rows * r.bytes, r.write, weight, levels});
      return;
    }
    for (int64_t k = 0; k < r.rows; ++k) out.push_back({r.op, r.addr + k * r.stride, r.bytes, r.write, weight, levels});
  }

  std::shared_ptr<const Tiles> tiles_;
  std::vector<TileVisit> plan_;
  bool l1_elsewhere_;
  std::shared_ptr<const std::vector<Window>> windows_;  // the LLC pass's, by first tile
  size_t w_ = 0;                                        // the next window
  int64_t wrow_ = 0;                                    // its next row
  std::shared_ptr<const std::vector<InputStays>> stays_;  // BWMA products whose A stays, by first tile
  size_t s_ = 0;                                          // the first not yet ended
  TileShape g_;
  int64_t line_, rows_per_line_, refresh_;
  int64_t row_ = 0;                  // the LLC pass's next row of the current tile
  std::array<bool, 3> fresh_{};      // which of the current tile's rectangles it touches
  bool llc_ = true;
  int64_t i_ = 0;
  int64_t phase_ = 0;
  int64_t run_ = 0;  // the L1 pass: tiles in a row of the same lines, up to the current one
  std::array<Recent, kRecentRects> recent_{};
  int64_t touched_ = 0;
};

// The tiles of core `core`'s share of a GEMM, in TiC-SAT's order: fn(inst, kt, nt, row0, tile) per
// tile of product `inst` (kt, nt its K and N tile, row0 its first row), and under BWMA first_round(inst, p0, p1)
// before a product's tiles (the core's output panels [p0, p1)).
template <class Fn, class Round>
void for_each_tile(const GemmWork& w, const RwmaTiling& t, int64_t P, int64_t core, const TileShape& g, Fn&& fn,
                   Round&& first_round) {
  const int64_t S = w.S, M = w.m, KT = w.k / S, NT = w.n / S;
  const bool bwma = w.arrangement == Arrangement::bwma;
  for (size_t inst = 0; inst < w.instances.size(); ++inst) {
    const auto& [av, bv, yv] = w.instances[inst];
    const bool whole = contiguous_tiles(bv, S);
    const int64_t e = av.elem;
    auto tile = [&](int64_t kt, int64_t nt, int64_t row0, int64_t rows) {
      return Tile{bv.addr(kt * S, nt * S), av.addr(row0, kt * S), yv.addr(row0, nt * S), whole ? 0 : bv.row_stride,
                  whole ? 1 : S, whole ? S * S * e : g.row_bytes, av.row_stride, yv.row_stride, rows};
    };
    if (bwma) {
      const auto [p0, p1] = core_rows(NT, P, core, 1);
      first_round(inst, p0, p1);
      for (int64_t np = p0; np < p1; ++np)
        for (int64_t kt = 0; kt < KT; ++kt) fn(inst, kt, np, int64_t{0}, tile(kt, np, 0, M));
      continue;
    }
    for (int64_t gi = 0; gi < t.groups; ++gi) {
      const auto [b0, b1] = core_rows(t.blocks_in(gi), P, core, 1);
      for (int64_t kc = 0; kc < t.kchunks; ++kc)
        for (int64_t nc = 0; nc < t.nchunks; ++nc)
          rwma_chunk_tiles(t, gi, kc, nc, b0, b1, [&](int64_t kt, int64_t nt, int64_t row0, int64_t rows) {
            fn(inst, kt, nt, row0, tile(kt, nt, row0, rows));
          });
    }
  }
}

// Whether `mine` (a core's tiles) are core `other`'s moved by one distance per operand, each a
// whole number of L1 set spans (sets x line) and of TLB set spans (pages x TLB sets): then the two cores' L1s (modulo-indexed)
// and TLBs meet the same sets and pages in the same order, with other lines and pages (an
// operand's lines stay distinct from the others', each in its own region), so they count the
// same misses, accesses and page walks (CoreShare::l1_as). Under RWMA the cores' sequence blocks
// are whole blocks apart (gemm_share uses it there only).
bool moved_copy(const Tiles& mine, int64_t other, const GemmWork& w, const RwmaTiling& t, const SystemDesc& s,
                const TileShape& g) {
  if (mine.size() == 0 || s.l1.hashed_index) return false;
  // A move keeps every line in its L1 set when it is a whole number of L1 set spans, and every
  // page in its TLB set when it is a whole number of pages times the TLB's sets (PageLru's modulo
  // index; one set when fully associative).
  const int64_t l1_span = s.l1.sets() * s.l1.line_bytes;
  const int64_t tlb_span = s.tlb.entries > 0 ? s.tlb.page_bytes * s.tlb.sets() : 1;
  const int64_t span = std::max(l1_span, tlb_span);
  if (l1_span <= 0 || tlb_span <= 0 || span % l1_span != 0 || span % tlb_span != 0) return false;
  int64_t i = 0;
  bool same = true;
  std::array<int64_t, 3> d{};
  for_each_tile(
      w, t, s.cores, other, g,
      [&](size_t, int64_t, int64_t, int64_t, const Tile& x) {
        if (!same || i >= mine.size()) {
          same = false;
          return;
        }
        const Tile m = mine[i];
        const std::array<int64_t, 3> di{static_cast<int64_t>(m.w - x.w), static_cast<int64_t>(m.in - x.in),
                                        static_cast<int64_t>(m.out - x.out)};
        if (i++ == 0) d = di;
        same = di == d && m.rows == x.rows && m.w_rows == x.w_rows && m.w_bytes == x.w_bytes && m.w_stride == x.w_stride &&
               m.in_stride == x.in_stride && m.out_stride == x.out_stride;
      },
      [](size_t, int64_t, int64_t) {});
  return same && i == mine.size() && d[0] % span == 0 && d[1] % span == 0 && d[2] % span == 0;
}

}  // namespace

CoreShare gemm_share(const GemmWork& w, const SystemDesc& s, int64_t core, int a, int b, int y) {
  const int64_t S = w.S, P = s.cores, e = w.instances.empty() ? 1 : w.instances.front()[0].elem;
  const int64_t word = s.array.bytes_per_issue, W = ceil_div(S * e, word);
  const int64_t M = w.m, K = w.k, N = w.n, KT = K / S, NT = N / S;
  const bool bwma = paper_bwma(w.arrangement, "the in-order core model (gemm_share)");
  const RwmaTiling t = rwma_tiling(M, K, N, S, w.block_rows);  // TiC-SAT's RWMA tiling (rwma_tiling.h)
  const bool sampled = s.core_walk == CoreWalk::sampled;
  auto tiles = std::make_shared<Tiles>();
  const TileShape g{S, W, word, S * e, a, b, y};
  WindowBuilder groups;  // a sampled walk's RWMA L1 groups
  std::vector<InputStays> stays;  // a sampled walk's BWMA products whose A stays in the LLC
  CoreShare c;
  if (bwma) {
    const auto [p0, p1] = core_rows(NT, P, core, 1);
    tiles->reserve(static_cast<size_t>(w.instances.size() * (p1 - p0) * KT));
  } else {
    int64_t blocks = 0;
    for (int64_t gi = 0; gi < t.groups; ++gi) {
      const auto [b0, b1] = core_rows(t.blocks_in(gi), P, core, 1);
      blocks += b1 - b0;
    }
    tiles->reserve(static_cast<size_t>(w.instances.size() * blocks * KT * NT));
  }
  for_each_tile(
      w, t, P, core, g,
      [&](size_t inst, int64_t kt, int64_t nt, int64_t row0, const Tile& x) {
        // RWMA's L1 group: its sequence block, K group and N group.
        if (sampled && !bwma)
          groups.add(tiles->size(), static_cast<int64_t>(inst), (row0 * (t.kt + 1) + kt / t.kt1) * (t.nt + 1) + nt / t.nt1,
                     kt, nt, row0, x.rows, tile_steps_count(x, S));
        tiles->push_back(x);
        c.units += W * x.rows;
        c.groups += 1;
        c.issues += S * W + W * (x.rows + 2 * S - 1) - 1;  // weight rows, streamed rows with fill and drain
      },
      [&](size_t inst, int64_t p0, int64_t p1) {
        const auto& [av, bv, yv] = w.instances[inst];
        if (sampled && p1 - p0 > 2 && bwma_input_stays(av, bv, yv, M, K, NT, S, P, s.llc))
          stays.push_back({tiles->size() + KT, tiles->size() + (p1 - p0 - 1) * KT, tiles->size() + (p1 - p0) * KT});
      });
  std::vector<TileVisit> plan;
  // A core whose tiles are core 0's moved by whole L1 and TLB set spans counts core 0's L1 pass.
  const bool l1_elsewhere = sampled && !bwma && core > 0 && moved_copy(*tiles, 0, w, t, s, g);
  if (l1_elsewhere) c.l1_as = 0;
  // RWMA's L1 conflicts vary with where a tile's input and output lines fall among the L1's sets,
  // which moves with the N column through a chunk: its blocks are whole sweeps of a chunk's N
  // columns (its L1 groups of one K group), which meet every such place.
  if (sampled && !l1_elsewhere) plan = l1_plan(*tiles, g, s, bwma ? 1 : t.nt2 * t.kt1 * t.nt1);
  // Core 0 of such cores, too small to sample, walks its every tile in the L1 pass, after its
  // own LLC pass: all the cores then reach the LLC piece by piece alike (walked through both
  // levels instead, its steps and the others' pieces took the shared weight lines' misses in
  // another order: on bert-mini training a node's busiest-core LLC misses 9.8% off, 1.1% so).
  if (sampled && !bwma && core == 0 && P > 1 && plan.empty() && moved_copy(*tiles, 1, w, t, s, g))
    for (int64_t i = 0; i < tiles->size(); ++i) plan.push_back({i, 1, false});
  const bool llc_pass = !plan.empty() || l1_elsewhere;
  std::vector<Window> windows;
  if (llc_pass && !bwma) windows = groups.take(w, g, s.llc);
  if (!llc_pass) stays.clear();
  c.steps =
      TileWalk(std::move(tiles), std::move(plan), std::move(windows), std::move(stays), g, s.llc, P, l1_elsewhere);
  return c;
}

}  // namespace bertlab::hw

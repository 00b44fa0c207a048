// The analytic traffic of the RWMA GEMM across k-steps (analytic_rwma_detail.h): the Y and A
// lines of each core's block that miss from one k-step to the next, per LLC set.
#include <array>
#include <bit>
#include <optional>

#include "hwmodel/analytic_rwma_detail.h"
#include "hwmodel/layout.h"

namespace bertlab::hw::analytic_detail {

namespace {

// The k-step windows of one round of the RWMA GEMM, decided per LLC set: the walk (any
// layout), its skip bounds and its shortcuts (scan, steady windows, repeated column tiles)
// share the round's shapes and scratch counts here. The members keep the names of the
// formulas (S, KT, L, ...). run() goes over the column tiles once.
class KStepWindows {
 public:
  // `full`: where the bounds of full rounds are kept, when this round is one of them whose
  // per-set counts are the first one's rotated (else nullptr).
  // `w_tiles`: the fullest set of each whole weight tile, kept for every round of the GEMM
  // (filled as needed; see WeightTileBounds).
  KStepWindows(const GemmWork& gemm, const MatrixView& a_view, const MatrixView& b_view, const MatrixView& y_view,
               const SystemDesc& sys, int64_t cores_per_round, int64_t round, int64_t active, KStepBounds* full,
               WeightTileBounds& w_tiles);
  KStepMisses run();

 private:
  struct Added {  // `times` appends of the stored body [begin, end) of one list
    size_t begin, end;
    int64_t times;
  };
  int64_t rows_of(int64_t blk) const { return std::min(Mb, w.m - blk * Mb); }
  void keep(std::vector<Sweep>& v, int64_t l) const;
  void row_lines(std::vector<int64_t>& out, const MatrixView& v, int64_t m, int64_t tile) const;
  std::pair<int64_t, int64_t> row_span(const MatrixView& v, int64_t m, int64_t tile) const;
  std::pair<int64_t, int64_t> tile0(const MatrixView& v, int64_t t) const;
  int32_t max_union(const MatrixView& v, int64_t t1, int64_t t2);
  int32_t max_weight_tile(int64_t kb, int64_t nb, int32_t limit);
  bool same_lines(const MatrixView& v, int64_t t1, int64_t t2);
  SweepRuns& runs(size_t j) { return j % 2 ? k_miss.a[j / 2] : k_miss.y[j / 2]; }
  void emit(size_t j, std::pair<size_t, size_t> range);
  std::pair<size_t, size_t> emit_out(size_t j);
  void walk(int64_t nb, int64_t kb, bool y_again, bool a_again);
  void weight_lines(std::vector<int64_t>& into, int64_t kb, int64_t nb);
  void scan(int64_t nb, int64_t kb, bool y_again, bool a_again);
  void steady_pass(int64_t nb, int64_t kb, bool y_again, bool a_again);
  void scan_clear();
  void move_tile(const MatrixView& v, int64_t from, int64_t to);
  void steady(int64_t nb, int64_t kb, bool y_again, bool a_again);
  void window(int64_t nb, int64_t kb);
  void y_bounds(int64_t nb);
  bool k_steps_fit(int64_t nb);
  void replay(const std::vector<std::vector<Added>>& lg);
  void record(std::vector<std::vector<Added>>& lg);

  const GemmWork& w;
  const MatrixView &a, &b, &y;
  const SystemDesc& s;
  const int64_t P, r, act;
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, e = a.elem;
  const int64_t Mb = w.block_rows;
  const int64_t sets = s.llc.sets(), ways = s.llc.ways;
  const SetIndex set_of{s.llc};
  const BlockOf line_of{L};  // an address's line
  const size_t lists = static_cast<size_t>(2 * act);
  bool can_skip = false, fast = false;  // set by the constructor (see there)
  int64_t ra = 0, ry = 0;               // lines per row of A and Y (fast)
  KStepMisses k_miss;

  // Skip bounds: per-set counts and scratch lists, and max_union of A's k-tiles kb-1 and kb.
  std::vector<int32_t> count;
  std::vector<int64_t> touched, lines_p, lines_c;
  std::vector<int32_t> max_a;
  int32_t max_a_rest = -1;  // the largest of max_a[1..KT-1] (-1: not known yet)
  struct UnionShape {  // max_union of a tile pair of `v` (fast): lines per row, how far apart
    const MatrixView* v;
    int64_t n1, n2, apart;
    int32_t most;
  };
  std::vector<UnionShape> union_shapes;
  struct OffsetShape {  // max_union of a tile pair of `v` (modulo index, not fast): where and how wide
    const MatrixView* v;
    int64_t offset, apart, n1, n2;
    int32_t most;
  };
  std::vector<OffsetShape> offset_shapes;
  // The fullest set of a whole weight tile by where its first row starts in a line, under a
  // modulo index (`w_by_offset`; WeightTileBounds).
  bool w_by_offset = false;
  WeightTileBounds& w_tile_max;
  int32_t weight_tile_most(int64_t kb, int64_t nb);
  // The skip bounds of the Y tiles of column tile nb (computed once per nb when needed).
  int64_t bound_nb = -1;
  int32_t y_tile = 0, y_pair = 0;
  KStepBounds* full_bounds = nullptr;

  // Each window's list per core and operand (list j: Y of core j/2 when j is even, A when
  // odd) is stored once (SweepRuns::put) and appended; while `log` is set the appends are
  // also logged, so that a stretch of windows can be appended again.
  std::vector<std::vector<Added>>* log = nullptr;
  std::vector<std::vector<Sweep>> out;

  // The walk's window and the rows' lines of every core at the current row.
  // (Allocated when first used: O(sets) each, and most rounds use neither; speed only.)
  std::optional<SetLoad> win_, empty_;
  std::vector<std::vector<int64_t>> ap, yp, ac, yc;
  std::vector<int64_t> same_set;

  // The scan's per-set counts (all zeros between scans) and weight lines.
  std::vector<int32_t> scan_cnt;
  std::vector<int64_t> wl_scan, wl_next;
  // Whether the counts hold the last scan's W + Ac + Yc (its weight lines in wl_scan), and
  // row 0's lines of its Ac and Yc tiles (first, how many).
  bool scan_held = false;
  std::pair<int64_t, int64_t> held_a, held_y;

  // Steady windows: `cur` holds W + T of the last one (see steady()).
  std::optional<SetLoad> cur_;
  SetLoad& cur() {
    if (!cur_) cur_.emplace(s.llc);
    return *cur_;
  }
  int64_t cur_a = -1, cur_y = -1, cur_wk = -1, cur_wn = -1;  // tiles whose lines `cur` holds
  bool have_last = false, last_ya = false, last_aa = false;
  std::vector<std::pair<size_t, size_t>> last_range;
  std::vector<int64_t> wl_old, wl_new;
  std::vector<uint8_t> over_before;

  // Repeated column tiles: the logs of k-step 0's window (x) and of k-steps 1..KT-1 (b).
  std::vector<std::vector<Added>> x_log, b_log;
  bool have_x = false, have_b = false;
};

KStepWindows::KStepWindows(const GemmWork& gemm, const MatrixView& a_view, const MatrixView& b_view,
                           const MatrixView& y_view, const SystemDesc& sys, int64_t cores_per_round, int64_t round,
                           int64_t active, KStepBounds* full, WeightTileBounds& w_tiles)
    : w(gemm), a(a_view), b(b_view), y(y_view), s(sys), P(cores_per_round), r(round), act(active),
      w_tile_max(w_tiles), full_bounds(full) {
  k_miss.y.resize(act);
  k_miss.a.resize(act);
  // Skipping k-steps that cannot overflow (speed only; the counts are unchanged). When
  // every row of A, Y and the weights has lines of its own (row strides of at least a
  // line, distinct matrices), the window of any line of a k-step, with that line's own
  // row added, holds distinct lines of three groups only: the two A tiles' lines (k-tiles
  // kbp and kb, every row of the round), the two Y tiles' lines (nbp and nb) and the
  // weight tile. If the most lines any set gets from each group add up to at most the
  // ways, no line of that k-step can miss.
  const auto extent = [&](const MatrixView& v) {
    return std::pair<int64_t, int64_t>(static_cast<int64_t>(v.addr(0, 0) / L),
                                       static_cast<int64_t>(v.addr(v.rows - 1, v.cols - 1) / L));
  };
  const auto ea = extent(a), ey = extent(y), eb = extent(b);
  auto disjoint = [](std::pair<int64_t, int64_t> x, std::pair<int64_t, int64_t> z) { return x.second < z.first || z.second < x.first; };
  can_skip = a.panel_width == 0 && y.panel_width == 0 && b.panel_width == 0 && a.row_stride >= L &&
             y.row_stride >= L && b.row_stride >= L && disjoint(ea, ey) && disjoint(ea, eb) && disjoint(ey, eb);
  // Shortcuts (speed only; every list is the one the walk below would give). They need
  // `fast`: rows of A, Y and the weights on lines of their own (row strides of whole lines,
  // a row's last line before the next row's first), distinct matrices, row-major data, a
  // modulo index and tile rows shorter than the sets, so that every line of a window is
  // distinct, lies in its own row, and the consecutive lines of one tile row are in
  // distinct sets. Every row then sits alike in its lines: row m's lines of a tile are row
  // 0's moved by m row strides, so whether two tiles of a matrix have the same lines is
  // seen on row 0.
  fast = can_skip && !s.llc.hashed_index && rows_apart(a, L) && rows_apart(y, L) && rows_apart(b, L) &&
         ceil_div(S * e, L) + 1 <= sets;
  ra = a.row_stride / std::max<int64_t>(1, L), ry = y.row_stride / std::max<int64_t>(1, L);  // lines per row (fast)
  count.assign(can_skip ? sets : 0, 0);
  // Whole weight tiles that start at the same byte of a line have the same fullest set under a
  // modulo index (WeightTileBounds; row-major weights, which can_skip requires; speed only).
  w_by_offset = can_skip && !s.llc.hashed_index;
  if (w_by_offset && w_tile_max.by_offset.empty()) w_tile_max.by_offset.assign(static_cast<size_t>(L), -1);
  if (can_skip && full_bounds && !full_bounds->max_a.empty()) {
    max_a = full_bounds->max_a;
  } else {
    max_a.resize(can_skip ? KT : 0);
    for (int64_t kb = 0; kb < static_cast<int64_t>(max_a.size()); ++kb) max_a[kb] = max_union(a, kb > 0 ? kb - 1 : KT - 1, kb);
    if (can_skip && full_bounds) full_bounds->max_a = max_a;
  }
  if (can_skip && full_bounds && full_bounds->y_tile.empty()) full_bounds->y_tile.assign(NT, -1), full_bounds->y_pair.assign(NT, -1);
  out.resize(lists);
  ap.resize(act), yp.resize(act), ac.resize(act), yc.resize(act);
  scan_cnt.assign(fast ? sets : 0, 0);
  last_range.resize(lists);
  x_log.resize(lists), b_log.resize(lists);
}

// Appends line l to a list of sweeps, joining the last sweep when it ends at l.
void KStepWindows::keep(std::vector<Sweep>& v, int64_t l) const {
  const uint64_t at = static_cast<uint64_t>(l) * L;
  if (!v.empty() && v.back().end() == at) v.back().width += L, v.back().stride = v.back().width;
  else v.push_back({at, 1, L, L});
}

// The first and last line of row m of column tile `tile` of `v` (its lines are that range).
std::pair<int64_t, int64_t> KStepWindows::row_span(const MatrixView& v, int64_t m, int64_t tile) const {
  const int64_t c0 = tile * S, n = std::min(S, v.cols - c0);
  const uint64_t lo = v.addr(m, c0), hi = lo + n * v.elem - 1;
  return {line_of(lo), line_of(hi)};
}

// The lines of row m of column tile `tile` of `v`.
void KStepWindows::row_lines(std::vector<int64_t>& out, const MatrixView& v, int64_t m, int64_t tile) const {
  out.clear();
  const auto [l0, l1] = row_span(v, m, tile);
  for (int64_t l = l0; l <= l1; ++l) out.push_back(l);
}

// Row 0's lines of tile t: the first, how many.
std::pair<int64_t, int64_t> KStepWindows::tile0(const MatrixView& v, int64_t t) const {
  const int64_t c0 = t * S, n = std::min(S, v.cols - c0);
  const uint64_t lo = v.addr(0, c0);
  return std::pair<int64_t, int64_t>(static_cast<int64_t>(lo / L), static_cast<int64_t>((lo + n * v.elem - 1) / L - lo / L + 1));
}

// The most distinct lines in one set of the union of tile t1 and t2 of `v` over the
// round's rows (t1 == t2: one tile).
int32_t KStepWindows::max_union(const MatrixView& v, int64_t t1, int64_t t2) {
  int32_t most = 0;
  touched.clear();
  if (fast) {  // the same lines, by row 0's moved (speed only)
    const auto [f1, n1] = tile0(v, t1);
    const auto [f2, n2] = tile0(v, t2);
    // Tile pairs of one matrix with as many lines each, as far apart, are the same lines
    // moved by whole lines (f1' - f1, every row alike), so under the modulo index (`fast`)
    // their per-set counts are rotated and the fullest set is the same: counted once per
    // shape (speed only).
    for (const auto& sh : union_shapes)
      if (sh.v == &v && sh.n1 == n1 && sh.n2 == n2 && sh.apart == f2 - f1) return sh.most;
    const int64_t rs = v.row_stride / L;
    for (int64_t c2 = 0; c2 < act; ++c2)
      for (int64_t i = 0; i < rows_of(r * P + c2); ++i) {
        const int64_t at = ((r * P + c2) * Mb + i) * rs;
        for (int64_t q = 0; q < n1; ++q) most = tally_line(f1 + at + q, set_of, count, touched, most);
        for (int64_t q = 0; q < n2; ++q)
          if (f2 + q < f1 || f2 + q >= f1 + n1) most = tally_line(f2 + at + q, set_of, count, touched, most);
      }
    for (int64_t st : touched) count[st] = 0;
    union_shapes.push_back({&v, n1, n2, f2 - f1, most});
    return most;
  }
  // Under a modulo index, tile pairs of one matrix as wide, as far apart, whose first columns
  // are a whole number of lines apart are the same lines moved by whole lines in every row
  // (MatrixView::addr): rotated per-set counts, the same fullest set. Counted once per byte
  // of a line the pair starts at (speed only).
  const bool by_offset = !s.llc.hashed_index && v.panel_width == 0;
  const int64_t off = static_cast<int64_t>(v.addr(0, t1 * S) % L), n1 = std::min(S, v.cols - t1 * S),
                n2 = std::min(S, v.cols - t2 * S);
  if (by_offset)
    for (const auto& sh : offset_shapes)
      if (sh.v == &v && sh.offset == off && sh.apart == t2 - t1 && sh.n1 == n1 && sh.n2 == n2) return sh.most;
  for (int64_t c2 = 0; c2 < act; ++c2)
    for (int64_t i = 0; i < rows_of(r * P + c2); ++i) {
      const int64_t m = (r * P + c2) * Mb + i;
      row_lines(lines_p, v, m, t1);
      row_lines(lines_c, v, m, t2);
      for (int64_t l : lines_c)
        if (std::find(lines_p.begin(), lines_p.end(), l) == lines_p.end()) lines_p.push_back(l);
      for (int64_t l : lines_p) most = tally_line(l, set_of, count, touched, most);
    }
  for (int64_t st : touched) count[st] = 0;
  if (by_offset) offset_shapes.push_back({&v, off, t2 - t1, n1, n2, most});
  return most;
}

// The most lines in one set of the weight tile (kb, nb); it may stop once past `limit` (then
// some value above it: enough for the skip test, speed only).
int32_t KStepWindows::max_weight_tile(int64_t kb, int64_t nb, int32_t limit) {
  int32_t most = 0;
  touched.clear();
  for (int64_t kr = 0; kr < S && kb * S + kr < b.rows && most <= limit; ++kr) {
    const auto [l0, l1] = row_span(b, kb * S + kr, nb);
    for (int64_t l = l0; l <= l1; ++l) most = tally_line(l, set_of, count, touched, most);
  }
  for (int64_t st : touched) count[st] = 0;
  return most;
}

// The fullest set of the whole weight tile (kb, nb) (w_by_offset), once per byte of a line it
// may start at.
int32_t KStepWindows::weight_tile_most(int64_t kb, int64_t nb) {
  int32_t& most = w_tile_max.by_offset[static_cast<size_t>(b.addr(kb * S, nb * S) % L)];
  if (most < 0) most = max_weight_tile(kb, nb, std::numeric_limits<int32_t>::max());
  return most;
}

// Whether tiles t1 and t2 of `v` have the same lines in every row (seen on row 0; a row's
// lines of a tile are one range, so the same range).
bool KStepWindows::same_lines(const MatrixView& v, int64_t t1, int64_t t2) {
  return t1 == t2 || row_span(v, 0, t1) == row_span(v, 0, t2);
}

// Appends a stored body to list j (and to the log, while one is kept).
void KStepWindows::emit(size_t j, std::pair<size_t, size_t> range) {
  if (range.first >= range.second) return;
  runs(j).add(range.first, range.second, 1);
  if (!log) return;
  auto& lg = (*log)[j];
  if (!lg.empty() && lg.back().begin == range.first && lg.back().end == range.second) ++lg.back().times;
  else lg.push_back({range.first, range.second, 1});
}

// Stores the window's missing lines of list j (out[j]) and appends them.
std::pair<size_t, size_t> KStepWindows::emit_out(size_t j) {
  std::pair<size_t, size_t> range{0, 0};
  if (!out[j].empty()) range = runs(j).put(out[j]);
  out[j].clear();
  emit(j, range);
  return range;
}

// The walk: the window of every line built row by row (exact for any layout).
void KStepWindows::walk(int64_t nb, int64_t kb, bool y_again, bool a_again) {
  const int64_t nbp = kb > 0 ? nb : nb - 1, kbp = kb > 0 ? kb - 1 : KT - 1;
  if (!win_) win_.emplace(s.llc), empty_.emplace(s.llc);
  SetLoad& win = *win_;
  win = *empty_;
  win.add(block_sweeps(b, kb * S, std::min(S, b.rows - kb * S), nb * S, std::min(S, b.cols - nb * S)));
  for (int64_t c2 = 0; c2 < act; ++c2) {
    const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
    win.add(block_sweeps(a, q0, qn, kbp * S, std::min(S, a.cols - kbp * S)));
    win.add(block_sweeps(y, q0, qn, nbp * S, std::min(S, y.cols - nbp * S)));
  }
  for (int64_t i = 0; i < Mb; ++i) {
    int64_t row_lines_i = 0;  // row i's lines of every core (ap, yp, ac, yc)
    for (int64_t c2 = 0; c2 < act; ++c2) {
      ap[c2].clear(), yp[c2].clear(), ac[c2].clear(), yc[c2].clear();
      if (i >= rows_of(r * P + c2)) continue;
      const int64_t m = (r * P + c2) * Mb + i;
      row_lines(ap[c2], a, m, kbp), row_lines(yp[c2], y, m, nbp);
      row_lines(ac[c2], a, m, kb), row_lines(yc[c2], y, m, nb);
      row_lines_i += static_cast<int64_t>(ap[c2].size() + yp[c2].size() + ac[c2].size() + yc[c2].size());
      for (int64_t l : ap[c2]) win.add_line(l, -1);
      for (int64_t l : yp[c2]) win.add_line(l, -1);
    }
    // Row i's lines in the window of core c's line l, counted in l's set once each:
    // cores after c touched theirs in the previous k-step after l, cores before c
    // in the next k-step before l; `own_prev`/`own_next` say which of c's own count.
    auto overflows = [&](int64_t c, int64_t l, bool a_line) {
      // Decided without counting when even all of row i's lines cannot overflow the
      // set, or l alone does (same_set holds l and at most row_lines_i others).
      if (!win.overflowing(l, static_cast<double>(1 + row_lines_i))) return false;
      if (win.overflowing(l, 1.0)) return true;
      const int64_t st = set_of(l);
      same_set.assign(1, l);
      auto take = [&](const std::vector<int64_t>& v) {
        for (int64_t x : v)
          if (set_of(x) == st && std::find(same_set.begin(), same_set.end(), x) == same_set.end()) same_set.push_back(x);
      };
      for (int64_t c2 = 0; c2 < act; ++c2) {
        if (c2 > c || (a_line && c2 == c)) take(yp[c2]);
        if (c2 > c) take(ap[c2]);
        if (c2 < c || (!a_line && c2 == c)) take(ac[c2]);
        if (c2 < c) take(yc[c2]);
      }
      return win.overflowing(l, static_cast<double>(same_set.size()));
    };
    for (int64_t c = 0; c < act; ++c) {
      if (y_again)
        for (int64_t l : yc[c])
          if (overflows(c, l, false)) keep(out[2 * c], l);
      if (a_again)
        for (int64_t l : ac[c])
          if (overflows(c, l, true)) keep(out[2 * c + 1], l);
    }
    for (int64_t c2 = 0; c2 < act; ++c2) {
      for (int64_t l : ac[c2]) win.add_line(l, 1);
      for (int64_t l : yc[c2]) win.add_line(l, 1);
    }
  }
  for (size_t j = 0; j < lists; ++j) emit_out(j);
}

// The lines of weight tile (kb, nb), row by row (none for kb < 0).
void KStepWindows::weight_lines(std::vector<int64_t>& into, int64_t kb, int64_t nb) {
  into.clear();
  for (int64_t kr = 0; kb >= 0 && kr < S && kb * S + kr < b.rows; ++kr) {
    const auto [l0, l1] = row_span(b, kb * S + kr, nb);
    for (int64_t l = l0; l <= l1; ++l) into.push_back(l);
  }
}

// The walk when `fast` (the same lists): every line of the window is distinct and in its
// own row, so with positions p = (row i, core c) in the walk's order, the load of the set
// of core c's line l at row i, row i's lines counted back in as the walk takes them, is
//   Y line: W + Yp(after p) + Yc(up to p) + Ap(after p) + Ac(up to p),
//   A line: W + Yp(from p) + Yc(before p) + Ap(after p) + Ac(up to p),
// where W is the weight tile, Ap/Yp the rows' lines of the previous k-step's tiles and
// Ac/Yc the next's: rows after i are still in as the previous k-step left them, rows
// before i as the next one, and of row i the cores after c count their previous lines,
// those before c their next ones, and core c its next A lines and, for an A line, its
// previous Y lines (its own other lines of the same matrix lie in other sets). One pass
// over the positions with per-set counts, from W + Yp + Ap, gives every decision.
void KStepWindows::scan(int64_t nb, int64_t kb, bool y_again, bool a_again) {
  const int64_t nbp = kb > 0 ? nb : nb - 1, kbp = kb > 0 ? kb - 1 : KT - 1;
  const auto [ap0, apn] = tile0(a, kbp);
  const auto [ac0, acn] = tile0(a, kb);
  const auto [yp0, ypn] = tile0(y, nbp);
  const auto [yc0, ycn] = tile0(y, nb);
  int32_t* const cnt = scan_cnt.data();
  const SetIndex set_at = set_of;  // a local copy, kept in registers (speed only)
  auto bump = [&](int64_t first, int64_t n, int32_t d) {
    for (int64_t q = 0; q < n; ++q) cnt[set_at(first + q)] += d;
  };
  weight_lines(wl_next, kb, nb);
  if (scan_held && held_a == std::pair{ap0, apn} && held_y == std::pair{yp0, ypn}) {
    // The counts hold the last scan's W + Ac + Yc, and its Ac and Yc are this one's Ap and
    // Yp (the next k-step of the same column tile): only the weight tile changes (the
    // same whole-number counts as building W + Ap + Yp afresh; speed only).
    for (int64_t l : wl_scan) cnt[set_at(l)] -= 1;
    for (int64_t l : wl_next) cnt[set_at(l)] += 1;
  } else {
    scan_clear();
    for (int64_t l : wl_next) cnt[set_at(l)] += 1;
    for (int64_t c2 = 0; c2 < act; ++c2)
      for (int64_t i = 0; i < rows_of(r * P + c2); ++i) {
        const int64_t m = (r * P + c2) * Mb + i;
        bump(ap0 + m * ra, apn, 1), bump(yp0 + m * ry, ypn, 1);
      }
  }
  std::swap(wl_scan, wl_next);
  for (int64_t i = 0; i < Mb; ++i)
    for (int64_t c = 0; c < act; ++c) {
      if (i >= rows_of(r * P + c)) continue;
      const int64_t m = (r * P + c) * Mb + i;
      const int64_t al = ac0 + m * ra, yl = yc0 + m * ry;
      bump(ap0 + m * ra, apn, -1), bump(al, acn, 1);
      if (a_again)
        for (int64_t q = 0; q < acn; ++q)
          if (cnt[set_at(al + q)] > ways) keep(out[2 * c + 1], al + q);
      bump(yp0 + m * ry, ypn, -1), bump(yl, ycn, 1);
      if (y_again)
        for (int64_t q = 0; q < ycn; ++q)
          if (cnt[set_at(yl + q)] > ways) keep(out[2 * c], yl + q);
    }
  // The counts now hold W + Ac + Yc: kept for the next scan (scan_clear).
  scan_held = true, held_a = {ac0, acn}, held_y = {yc0, ycn};
}

// Takes the counts the last scan left (W + Ac + Yc) back to all zeros: a fill is cheaper
// than taking them back line by line when the sets are not many more than those lines
// (speed only).
void KStepWindows::scan_clear() {
  if (!scan_held) return;
  scan_held = false;
  const auto [ac0, acn] = held_a;
  const auto [yc0, ycn] = held_y;
  if (sets <= 8 * static_cast<int64_t>(wl_scan.size() + act * Mb * (acn + ycn))) {
    std::fill(scan_cnt.begin(), scan_cnt.end(), 0);
    return;
  }
  int32_t* const cnt = scan_cnt.data();
  for (int64_t l : wl_scan) cnt[set_of(l)] -= 1;
  for (int64_t c2 = 0; c2 < act; ++c2)
    for (int64_t i = 0; i < rows_of(r * P + c2); ++i) {
      const int64_t m = (r * P + c2) * Mb + i;
      for (int64_t q = 0; q < acn; ++q) cnt[set_of(ac0 + m * ra + q)] -= 1;
      for (int64_t q = 0; q < ycn; ++q) cnt[set_of(yc0 + m * ry + q)] -= 1;
    }
}

// Moves every row of the round in `cur` from tile `from` of `v` (none if < 0) to tile `to`.
void KStepWindows::move_tile(const MatrixView& v, int64_t from, int64_t to) {
  for (int64_t c2 = 0; c2 < act; ++c2)
    for (int64_t i = 0; i < rows_of(r * P + c2); ++i) {
      const int64_t m = (r * P + c2) * Mb + i;
      if (from >= 0) {
        const auto [l0, l1] = row_span(v, m, from);
        for (int64_t l = l0; l <= l1; ++l) cur().add_line(l, -1);
      }
      const auto [l0, l1] = row_span(v, m, to);
      for (int64_t l = l0; l <= l1; ++l) cur().add_line(l, 1);
    }
}

// Steady windows (fast only): when k-tiles kbp and kb of A have the same lines and so do
// column tiles nbp and nb of Y, every row's lines leave the window and join it again
// unchanged, so the window of row i's line l holds the weight tile and every other row's
// lines; with row i's own lines in l's set counted back in (all of them: the other
// cores' on either side, the core's own of the other matrix, and its own of the same
// matrix lie in other sets) the load of l's set is W + T there: the weight tile's lines
// and one line per row and operand, the same for every row. So l misses iff W + T
// overflows its set. `cur` holds W + T of the last steady window, moved line by line; a
// steady window with the same T and flags whose weight tile does not turn any set over or
// back under the ways has the last one's lists, appended again without a walk.
void KStepWindows::steady(int64_t nb, int64_t kb, bool y_again, bool a_again) {
  bool same_t = true;
  if (cur_a < 0 || !same_lines(a, cur_a, kb)) move_tile(a, cur_a, kb), same_t = false;
  if (cur_y < 0 || !same_lines(y, cur_y, nb)) move_tile(y, cur_y, nb), same_t = false;
  cur_a = kb, cur_y = nb;
  weight_lines(wl_old, cur_wk, cur_wn);
  weight_lines(wl_new, kb, nb);
  over_before.clear();
  for (int64_t l : wl_old) over_before.push_back(cur().overflowing(l));
  for (int64_t l : wl_new) over_before.push_back(cur().overflowing(l));
  for (int64_t l : wl_old) cur().add_line(l, -1);
  for (int64_t l : wl_new) cur().add_line(l, 1);
  cur_wk = kb, cur_wn = nb;
  bool turned = false;
  for (size_t x = 0; x < wl_old.size(); ++x) turned |= cur().overflowing(wl_old[x]) != static_cast<bool>(over_before[x]);
  for (size_t x = 0; x < wl_new.size(); ++x)
    turned |= cur().overflowing(wl_new[x]) != static_cast<bool>(over_before[wl_old.size() + x]);
  if (have_last && same_t && !turned && last_ya == y_again && last_aa == a_again) {
    for (size_t j = 0; j < lists; ++j) emit(j, last_range[j]);
    return;
  }
  steady_pass(nb, kb, y_again, a_again);
  for (size_t j = 0; j < lists; ++j) last_range[j] = emit_out(j);
  have_last = true, last_ya = y_again, last_aa = a_again;
}

// The scan's decisions in a steady window, without its moves: every line's set holds W + T
// (`cur`), so each line of the round's rows misses iff `cur` overflows its set, in the scan's
// order (the same lists as scan(); the rows' lines leave and join the counts unchanged, so
// the scan's per-line moves cancel; speed only). The scan's held counts stay as the last
// scan left them, which its next call checks (scan_held).
void KStepWindows::steady_pass(int64_t nb, int64_t kb, bool y_again, bool a_again) {
  const auto [ac0, acn] = tile0(a, kb);
  const auto [yc0, ycn] = tile0(y, nb);
  const SetLoad& held = cur();
  for (int64_t i = 0; i < Mb; ++i)
    for (int64_t c = 0; c < act; ++c) {
      if (i >= rows_of(r * P + c)) continue;
      const int64_t m = (r * P + c) * Mb + i;
      const int64_t al = ac0 + m * ra, yl = yc0 + m * ry;
      if (a_again)
        for (int64_t q = 0; q < acn; ++q)
          if (held.overflowing(al + q)) keep(out[2 * c + 1], al + q);
      if (y_again)
        for (int64_t q = 0; q < ycn; ++q)
          if (held.overflowing(yl + q)) keep(out[2 * c], yl + q);
    }
}

// The window from k-step kb-1 to kb of column tile nb (from the last of nb-1 when kb is
// 0): skipped when its skip bounds fit the ways, else decided by the steady shortcut, the
// scan or the walk.
void KStepWindows::window(int64_t nb, int64_t kb) {
  // k-step 0 re-uses a Y line only when the column tile starts inside a line of the
  // previous one (S*e < line); an A line only after its first k-tile.
  const bool y_again = kb > 0 || (nb * S * e) % L != 0;
  const bool a_again = (kb * S * e) % L != 0;
  if (!y_again && !a_again) return;
  if (can_skip) {
    y_bounds(nb);
    // The weight tile's count stops once it leaves no room (then the window is not skipped).
    const int64_t most_ay = (kb > 0 ? y_tile : y_pair) + max_a[kb];
    auto most_w = [&] {  // exact for whole tiles when w_by_offset, else it may stop past the room left
      if (!w_by_offset || (kb + 1) * S > b.rows || (nb + 1) * S > b.cols)
        return max_weight_tile(kb, nb, static_cast<int32_t>(ways - most_ay));
      return weight_tile_most(kb, nb);
    };
    if (most_ay <= ways && most_ay + most_w() <= ways) return;
  }
  const int64_t nbp = kb > 0 ? nb : nb - 1, kbp = kb > 0 ? kb - 1 : KT - 1;
  if (fast && same_lines(a, kbp, kb) && same_lines(y, nbp, nb)) return steady(nb, kb, y_again, a_again);
  if (!fast) return walk(nb, kb, y_again, a_again);
  scan(nb, kb, y_again, a_again);
  for (size_t j = 0; j < lists; ++j) emit_out(j);
}

// The skip bounds of the Y tiles of column tile nb (y_tile, y_pair), computed once per nb.
void KStepWindows::y_bounds(int64_t nb) {
  if (bound_nb == nb) return;
  bound_nb = nb;
  if (full_bounds && full_bounds->y_tile[nb] >= 0) {
    y_tile = full_bounds->y_tile[nb], y_pair = full_bounds->y_pair[nb];
    return;
  }
  y_tile = max_union(y, nb, nb);
  y_pair = nb > 0 ? max_union(y, nb - 1, nb) : 0;
  if (full_bounds) full_bounds->y_tile[nb] = y_tile, full_bounds->y_pair[nb] = y_pair;
}

// Whether every window of column tile nb at k-steps 1..KT-1 passes window()'s skip bounds,
// so that none of them appends anything: tested once, with the largest A bound of those
// k-steps and the fullest set of any of the column tile's weight tiles, instead of once per
// k-step (speed only). Those windows' weight tiles are whole (kb < KT = k / S, nb < NT), so
// with w_by_offset window() takes their exact fullest set, which is at most the largest.
bool KStepWindows::k_steps_fit(int64_t nb) {
  if (!can_skip || !w_by_offset || KT < 2) return false;
  y_bounds(nb);
  if (max_a_rest < 0) max_a_rest = *std::max_element(max_a.begin() + 1, max_a.end());
  if (y_tile + max_a_rest > ways) return false;
  // Weight tiles (kb, nb) start at the same byte of a line for every kb when S rows are whole
  // lines (WeightTileBounds): one of them says it for all.
  const int64_t kb_last = (S * b.row_stride) % L == 0 ? 1 : KT - 1;
  int32_t w_most = 0;
  for (int64_t kb = 1; kb <= kb_last; ++kb) w_most = std::max(w_most, weight_tile_most(kb, nb));
  return y_tile + max_a_rest + w_most <= ways;
}

// Appends the logged appends again.
void KStepWindows::replay(const std::vector<std::vector<Added>>& lg) {
  for (size_t j = 0; j < lists; ++j)
    for (const auto& x : lg[j]) runs(j).add(x.begin, x.end, x.times);
}

// Logs the appends from here on into `lg` (cleared).
void KStepWindows::record(std::vector<std::vector<Added>>& lg) {
  for (auto& v : lg) v.clear();
  log = &lg;
}

// Repeated column tiles (row-major Y and weights whose rows sit alike in lines of their
// own, rows_apart; A may be any): the windows of column tile nb at k-steps 1..KT-1 hold
// the lines of Y tile nb (as nbp and nb), of A's k-tiles and of the weight tiles of
// column tile nb, and append Y tile nb's and A's lines; when tile nb-1 has the same Y
// and weight lines in every row (tiles narrower than a line), the walks and their skip
// bounds see the same lines, so the lists are the same and are appended again. So is
// k-step 0's window (Y tiles nbp = nb-1 and nb) when tiles nb-2, nb-1 and nb share
// their lines and nb starts inside a line as nb-1 does.
KStepMisses KStepWindows::run() {
  const bool alike_ok = rows_apart(y, L) && rows_apart(b, L);
  // A column tile whose windows are all those of the previous one appends the previous
  // one's lists again: as a repetition of the unit (SweepRuns) when it can, else from the logs.
  for (int64_t nb = 0; nb < NT; ++nb) {
    const bool like_prev = alike_ok && nb >= 1 && same_lines(y, nb - 1, nb) && same_lines(b, nb - 1, nb);
    const bool x_same = like_prev && have_x && nb >= 2 && same_lines(y, nb - 2, nb - 1) &&
                        ((nb * S * e) % L != 0) == (((nb - 1) * S * e) % L != 0);
    if (x_same && have_b) {
      for (size_t j = 0; j < lists; ++j) {
        if (runs(j).repeat_unit()) continue;
        runs(j).begin_unit();
        for (const auto& x : x_log[j]) runs(j).add(x.begin, x.end, x.times);
        for (const auto& x : b_log[j]) runs(j).add(x.begin, x.end, x.times);
      }
      continue;
    }
    for (size_t j = 0; j < lists; ++j) runs(j).begin_unit();
    if (x_same) {
      replay(x_log);
    } else {
      record(x_log);
      window(nb, 0);
      have_x = alike_ok;
    }
    if (like_prev && have_b) {
      replay(b_log);
    } else {
      record(b_log);
      if (!k_steps_fit(nb))
        for (int64_t kb = 1; kb < KT; ++kb) window(nb, kb);
      have_b = alike_ok;
    }
    log = nullptr;
  }
  return std::move(k_miss);
}

}  // namespace

KStepMisses rwma_k_steps(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                         const SystemDesc& s, int64_t P, int64_t r, int64_t act, KStepBounds* full,
                         WeightTileBounds& w_tiles) {
  return KStepWindows(w, a, b, y, s, P, r, act, full, w_tiles).run();
}

}  // namespace bertlab::hw::analytic_detail

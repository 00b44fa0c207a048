// The analytic traffic of the RWMA GEMM schedule (work.h): reuse windows of the A blocks
// across column tiles, of Y and A lines across k-steps, and of the weights within and
// across rounds of sequence blocks.
#include <array>
#include <bit>
#include <optional>

#include "hwmodel/analytic_detail.h"

namespace bertlab::hw::analytic_detail {

namespace {

// Every row of `v` (row-major) in lines of its own, at the same offset in them: row strides
// of whole lines, row 0's last line before row 1's first. Then two column ranges have the
// same lines in every row iff they have in row 0.
bool rows_apart(const MatrixView& v, int64_t L) {
  return v.panel_width == 0 && v.row_stride % L == 0 && (v.rows < 2 || v.addr(0, v.cols - 1) / L < v.addr(1, 0) / L);
}
// Whether column tiles t1 and t2 (S columns) of row 0 of `v` lie on the same lines.
bool same_tile_lines(const MatrixView& v, int64_t S, int64_t L, int64_t t1, int64_t t2) {
  auto span = [&](int64_t t) {
    const int64_t c0 = t * S, n = std::min(S, v.cols - c0);
    const uint64_t lo = v.addr(0, c0);
    return std::pair<uint64_t, uint64_t>(lo / L, (lo + n * v.elem - 1) / L);
  };
  return t1 == t2 || span(t1) == span(t2);
}

// Weights of the RWMA GEMM: core 0 touches every tile first, the other cores of a round
// load the same tiles right after it. Column tiles narrower than a line share its lines
// (a group of `tpg` tiles, one weight strip): a weight line is used at k-step kb of every
// tile of its group, in every round. Its reuse windows, decided per LLC set (setload.h):
// - within a round, from tile nb-1 to nb of its group (a whole k loop in between): the
//   round's A, the group's weight strip and the round's Y strip of the group;
// - across rounds, from the group's last tile in round r-1 to its first in round r at k-step
//   kb: all the weights; round r-1's A from k-strip kb on (all of it unless the group is
//   the last) and its Y from the group's last tile on; round r's A before k-step kb (all of
//   it unless the group is the first) and its Y before the group's first tile, and that
//   tile too after k-step 0.
// On a cache whose sets are not resolved (one set, or a spread hashed index; setload.h) the
// windows depend only on whether the group is the first or the last and whether kb is 0,
// starts an A line or lies inside one, so each such class is decided once. The members keep the names of the formulas
// (S, KT, tpg, ...); run() goes over the rounds once.
class WeightWindows {
 public:
  WeightWindows(const GemmWork& gemm, const MatrixView& a_view, const MatrixView& b_view, const MatrixView& y_view,
                const SystemDesc& sys, int64_t cores_per_round, DramStreams& streams)
      : w(gemm), a(a_view), b(b_view), y(y_view), s(sys), P(cores_per_round), dram(streams) {}
  void run(OperandTraffic& bo);

 private:
  struct Missed {  // lines `DramStreams::missing` read, with their repeat count
    std::vector<Sweep> lines;
    int64_t times;
  };
  int64_t rows_of(int64_t blk) const { return std::min(Mb, w.m - blk * Mb); }
  int64_t group_c0(int64_t g) const { return g * tpg * S; }
  int64_t group_c1(int64_t g) const { return std::min(b.cols, (g + 1) * tpg * S); }
  void add_round(SetLoad& into, const MatrixView& v, int64_t q, int64_t c0, int64_t c1) const;
  bool turns(const MatrixView& v) const { return v.panel_width == 0 && (P * Mb * v.row_stride) % turn == 0; }
  void missing(const std::vector<Sweep>& v, int64_t times, const SetLoad& win);
  void read_again(const std::vector<Missed>& lists);
  SetLoad within(int64_t r, int64_t g) const;
  SetLoad across(int64_t r, int64_t g, int64_t kb) const;
  std::vector<Sweep> tile_rows(int64_t g, int64_t kb0, int64_t kb1) const;
  void within_round(int64_t r, bool alike);
  void across_set_resolved(int64_t r, int64_t g);
  void across_uniform(int64_t r, int64_t g);
  static SetLoad whole(const MatrixView& v, const CacheDesc& c) {
    SetLoad l(c);
    l.add(block_sweeps(v, 0, v.rows, 0, v.cols));
    return l;
  }

  const GemmWork& w;
  const MatrixView &a, &b, &y;
  const SystemDesc& s;
  const int64_t P;
  DramStreams& dram;
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, e = b.elem;
  const int64_t Mb = w.block_rows, MB = (w.m + Mb - 1) / Mb, R = (MB + P - 1) / P;
  const int64_t tpg = std::max<int64_t>(1, L / (S * e));  // column tiles per weight line
  const int64_t NG = (NT + tpg - 1) / tpg;
  const bool uniform = !SetLoad::resolves_sets(s.llc);
  const SetLoad b_all = whole(b, s.llc);  // all the weights
  const bool by_lines = rows_apart(a, L) && rows_apart(y, L), b_apart = rows_apart(b, L);
  // Full rounds alike (speed only; the counts are unchanged). Under a modulo index, when
  // each round's rows of A and Y start a whole number of turns of the set index (sets x L
  // bytes) after the previous round's (row-major, P x Mb rows x the row stride), a window
  // of a full round (every block Mb rows), within it or across from the previous round,
  // holds its lines at the same sets as the same window of the first full round: the same
  // per-set loads, so the same weight lines miss. The first such round's lists (the lines
  // `DramStreams::missing` reads, with their repeat counts) are read again in the same order.
  const int64_t turn = s.llc.sets() * L;
  const bool rounds_alike = !uniform && !s.llc.hashed_index && turns(a) && turns(y);
  std::optional<std::vector<Missed>> within_lists, across_lists;  // of the first full round
  std::vector<Missed>* listing = nullptr;  // where `missing` records, if anywhere
  // The set-resolved windows within and across rounds, moved rather than rebuilt.
  MovingWindow within_win{SetLoad(s.llc), w, P, L}, across_win{b_all, w, P, L};
};

// The lines of round q's blocks of `v` in columns [c0, c1).
void WeightWindows::add_round(SetLoad& into, const MatrixView& v, int64_t q, int64_t c0, int64_t c1) const {
  c1 = std::min(c1, v.cols);
  if (q < 0 || c0 >= c1) return;
  for (int64_t blk = q * P; blk < std::min(MB, (q + 1) * P); ++blk)
    into.add(block_sweeps(v, blk * Mb, rows_of(blk), c0, c1 - c0));
}

// The weight lines of `v` that miss `times` times in the window `win` (as DramStreams::missing
// reads them; weights are only read, so as strided runs, SetLoad::overflowing_reads), also
// recorded into `listing` while it is set.
void WeightWindows::missing(const std::vector<Sweep>& v, int64_t times, const SetLoad& win) {
  if (times <= 0) return;
  if (win.uniform()) return dram.missing(w.b_name, false, 0, v, times, win);  // a share (DramStreams)
  auto lines = win.overflowing_reads(v);
  if (lines.empty()) return;
  dram.repeat(w.b_name, false, 0, lines, times);
  if (listing) listing->push_back({std::move(lines), times});
}

// The lists of the first full round, read again in the same order.
void WeightWindows::read_again(const std::vector<Missed>& lists) {
  for (const auto& x : lists) dram.repeat(w.b_name, false, 0, x.lines, x.times);
}

// The window of group g's weight lines within round r (from one tile of the group to the next).
SetLoad WeightWindows::within(int64_t r, int64_t g) const {
  SetLoad win(s.llc);
  add_round(win, a, r, 0, a.cols);
  win.add(block_sweeps(b, 0, b.rows, group_c0(g), group_c1(g) - group_c0(g)));
  add_round(win, y, r, group_c0(g), group_c1(g));
  return win;
}

// The window of group g's weight lines of k-step kb from round r-1 to round r.
SetLoad WeightWindows::across(int64_t r, int64_t g, int64_t kb) const {
  const int64_t nb_first = g * tpg, nb_last = std::min(NT, (g + 1) * tpg) - 1;
  SetLoad win = b_all;
  add_round(win, a, r - 1, nb_last < NT - 1 ? 0 : kb * S, a.cols);
  add_round(win, y, r - 1, nb_last * S, y.cols);
  add_round(win, a, r, 0, nb_first > 0 ? a.cols : kb * S);
  add_round(win, y, r, 0, (nb_first + (kb > 0 ? 1 : 0)) * S);
  return win;
}

// The weight lines of k-tiles [kb0, kb1) of group g.
std::vector<Sweep> WeightWindows::tile_rows(int64_t g, int64_t kb0, int64_t kb1) const {
  const int64_t r0 = kb0 * S, r1 = std::min(b.rows, kb1 * S);
  return r0 < r1 ? strip_sweeps(b, r0, r1 - r0, group_c0(g), group_c1(g) - group_c0(g), L) : std::vector<Sweep>{};
}

// Within round r: the tiles of a group after its first re-read the group's weight strip
// where the window from one tile to the next overflows its sets.
void WeightWindows::within_round(int64_t r, bool alike) {
  if (tpg <= 1) return;
  if (alike && within_lists) return read_again(*within_lists);
  if (alike) listing = &within_lists.emplace();
  std::optional<SetLoad> first, last;  // uniform only (set-resolved: within_win below)
  if (uniform) first = within(r, 0), last = within(r, NG - 1);
  for (int64_t g = 0; g < NG; ++g) {
    const int64_t tiles = std::min(tpg, NT - g * tpg);
    if (tiles <= 1 || group_c0(g) >= b.cols) continue;
    const auto strip = strip_sweeps(b, 0, b.rows, group_c0(g), group_c1(g) - group_c0(g), L);
    if (uniform) {
      missing(strip, tiles - 1, g == NG - 1 ? *last : *first);
      continue;
    }
    // within(r, g), moved from the last window (MovingWindow above; speed only).
    within_win.move(0, a, r, 0, a.cols);
    within_win.move(1, b, MovingWindow::kAllRows, group_c0(g), group_c1(g));
    within_win.move(2, y, r, group_c0(g), group_c1(g));
    missing(strip, tiles - 1, within_win.load());
  }
  listing = nullptr;
}

// Across rounds r-1 to r, set-resolved: the first tile of group g at every k-step.
// The window depends on kb only through the column bounds across() takes from it, which
// stay the same over the k-steps after the first of a group that is neither the first nor
// the last: a window is rebuilt only when its bounds change (speed only; the counts are
// unchanged). When every row of A and Y sits alike in lines of its own (rows_apart), a
// column range adds the lines of its row 0's line range in every row, so the bounds are
// compared as line ranges: for the first and the last group the window then changes once
// per A line, not per k-step.
void WeightWindows::across_set_resolved(int64_t r, int64_t g) {
  const int64_t nb_first = g * tpg, nb_last = std::min(NT, (g + 1) * tpg) - 1;
  auto line_range = [&](const MatrixView& v, int64_t c0, int64_t c1) {
    c1 = std::min(c1, v.cols);
    if (!by_lines || c0 >= c1) return std::array<int64_t, 2>{c0 >= c1 ? -1 : c0, c0 >= c1 ? -1 : c1};
    return std::array<int64_t, 2>{static_cast<int64_t>(v.addr(0, c0) / L),
                                  static_cast<int64_t>((v.addr(0, c1 - 1) + v.elem - 1) / L)};
  };
  auto bounds = [&](int64_t kb) {
    const auto x = line_range(a, nb_last < NT - 1 ? 0 : kb * S, a.cols);
    const auto z = line_range(a, 0, nb_first > 0 ? a.cols : kb * S);
    const auto u = line_range(y, 0, (nb_first + (kb > 0 ? 1 : 0)) * S);
    return std::array<int64_t, 6>{x[0], x[1], z[0], z[1], u[0], u[1]};
  };
  bool have_win = false;
  std::array<int64_t, 6> win_bounds{};
  // The k-tiles of a run of k-steps with one window are decided in one call when the
  // weight rows have lines of their own: the lines that miss, in the same order, and
  // reads count the same however a run of lines is split into sweeps (speed only).
  int64_t run0 = 0;
  auto decide = [&](int64_t kb0, int64_t kb1) {
    if (kb0 < kb1) missing(tile_rows(g, kb0, kb1), 1, across_win.load());
  };
  // across(r, g, kb), moved from the last window (MovingWindow above; speed only).
  auto move_across = [&](int64_t kb) {
    across_win.move(0, a, r - 1, nb_last < NT - 1 ? 0 : kb * S, a.cols);
    across_win.move(1, y, r - 1, nb_last * S, y.cols);
    across_win.move(2, a, r, 0, nb_first > 0 ? a.cols : kb * S);
    across_win.move(3, y, r, 0, (nb_first + (kb > 0 ? 1 : 0)) * S);
  };
  for (int64_t kb = 0; kb < KT; ++kb) {
    if (!have_win || bounds(kb) != win_bounds) {
      if (have_win) decide(run0, kb);
      move_across(kb), have_win = true, win_bounds = bounds(kb), run0 = kb;
    }
    if (!b_apart) decide(kb, kb + 1), run0 = kb + 1;
  }
  decide(run0, KT);
}

// Across rounds r-1 to r, uniform: the class of kb (0, starting an A line, inside one)
// decides; the groups between the first and the last behave as the second one. A class
// whose window overflows a share of the sets (a spread hashed index, setload.h) misses the
// lines of its tiles in that share.
void WeightWindows::across_uniform(int64_t r, int64_t g) {
  const int64_t rep = (g == 0 || g == NG - 1) ? g : 1;
  const int64_t kb_line = std::max<int64_t>(1, L / (S * e));  // k-tiles per A line
  // The k-tile whose window stands for each class (kb = 0, starting an A line, inside one).
  const int64_t kb1 = kb_line < KT ? kb_line : 0;
  const std::array<int64_t, 3> kb_of{0, kb1, KT == 1 ? 0 : (kb_line == 1 ? kb1 : 1)};
  std::array<double, 3> share{};
  for (size_t c = 0; c < 3; ++c)  // one window per distinct k-tile
    share[c] = c > 0 && kb_of[c] == kb_of[c - 1] ? share[c - 1]
               : c > 1 && kb_of[c] == kb_of[0]   ? share[0]
                                                 : across(r, rep, kb_of[c]).overflow_share();
  auto share_of = [&](int64_t kb) { return share[kb == 0 ? 0 : (kb % kb_line == 0 ? 1 : 2)]; };
  // Runs of k-tiles with one share, in order: the share of their lines (DramStreams::thinned).
  int64_t run = 0;
  for (int64_t kb = 1; kb <= KT; ++kb) {
    if (kb < KT && share_of(kb) == share_of(run)) continue;
    const double q = share_of(run);
    if (q > 0) dram.thinned(w.b_name, 0, q, [&] { dram.sweeps(w.b_name, false, 0, tile_rows(g, run, kb)); });
    run = kb;
  }
}

// Round 0's first touch of every weight line, then per round the re-reads within it and
// across from the previous one; `bo` gets the refetch count and its text.
void WeightWindows::run(OperandTraffic& bo) {
  const int64_t read0 = bo.read_lines;
  dram.sweeps(w.b_name, false, 0, strip_sweeps(b, 0, b.rows, 0, b.cols, L));  // round 0's first touch
  for (int64_t r = 0; r < R; ++r) {
    const bool alike = rounds_alike && (r + 1) * P * Mb <= w.m;  // round r (and r-1) full
    within_round(r, alike);
    if (r == 0) continue;
    if (alike && across_lists) {
      read_again(*across_lists);
      continue;
    }
    if (alike) listing = &across_lists.emplace();
    for (int64_t g = 0; g < NG; ++g) {
      if (group_c0(g) >= b.cols) continue;
      if (uniform) across_uniform(r, g);
      else across_set_resolved(r, g);
    }
    listing = nullptr;
  }
  const int64_t all = lines_of(block_sweeps(b, 0, b.rows, 0, b.cols), L);
  bo.refetch = std::max<int64_t>(bo.refetch, (bo.read_lines - read0 + all - 1) / std::max<int64_t>(1, all));
  bo.why = fmt::format("{} weight lines read {:.2f} times: shared by the cores of a round, re-used across the {} "
                       "column tiles and {} round(s) of sequence blocks where their reuse windows fit their "
                       "LLC sets", all, static_cast<double>(bo.read_lines - read0) / std::max<int64_t>(1, all), NT, R);
}

void rwma_weights(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                  const SystemDesc& s, int64_t P, DramStreams& dram, OperandTraffic& bo) {
  WeightWindows(w, a, b, y, s, P, dram).run(bo);
}

// Set-resolved caches: the Y and A lines of each core's block (round r, `act` cores) that
// miss from one k-step to the next (kb-1 to kb of a column tile; the last of tile nb-1 to
// the first of nb when they share Y lines), per core in k-step order. The window of the line
// of row i: the previous k-step's A and Y rows after i, the weight tile, the next k-step's A
// and Y rows before i (all blocks of the round), and row i's lines of the other cores on the
// side of the line's core they were touched on. Rows leave and join it one by one, so a
// k-step walked this way costs O(sets + rows x cores); the shortcuts below (steady windows,
// repeated column tiles) give the same lists without walking most k-steps.
struct KStepMisses {
  std::vector<SweepRuns> y, a;
};

// The k-step skip bounds that depend on the round's rows (most lines in a set of A's
// k-tiles kb-1 and kb, and of Y's column tiles nb and nb-1..nb), kept from the first full
// round for the others when full rounds' per-set counts are its rotated (speed only).
// The fullest LLC set of each whole weight tile of one GEMM under a modulo index, by the
// byte of a line its first row starts at (-1: not known yet). A whole tile's rows start at
// addr(kb x S, nb x S) + kr x row stride (row-major weights), so two whole tiles that start at
// the same byte of a line hold the same lines moved by whole lines: their per-set counts are
// rotated and the fullest set is the same, whatever the row stride. Kept for every round of
// the GEMM (speed only).
struct WeightTileBounds {
  std::vector<int32_t> by_offset;
};

struct KStepBounds {
  std::vector<int32_t> max_a;          // per kb (empty: not known yet)
  std::vector<int32_t> y_tile, y_pair;  // per nb (-1: not known yet)
};

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
         (S * e + L - 1) / L + 1 <= sets;
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

KStepMisses rwma_k_steps(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                         const SystemDesc& s, int64_t P, int64_t r, int64_t act, KStepBounds* full,
                         WeightTileBounds& w_tiles) {
  return KStepWindows(w, a, b, y, s, P, r, act, full, w_tiles).run();
}

// Column tiles alike (speed only): the A windows from tile nb to nb+1 hold the weight
// lines of tiles nb and nb+1 and the Y lines of both (with A's, the same for every nb);
// when tiles nb-1, nb and nb+1 of the weights and of Y have the same lines (tiles
// narrower than a line; seen on row 0 when every row sits alike in lines of its own),
// the windows of nb are those of nb-1 and so are the lines that miss in them.
bool column_tiles_alike(const MatrixView& b, const MatrixView& y, int64_t S, int64_t L, int64_t NT, int64_t nb) {
  const bool alike_ok = b.panel_width == 0 && y.panel_width == 0 && rows_apart(b, L) && rows_apart(y, L);
  return alike_ok && nb >= 1 && nb + 1 < NT && same_tile_lines(b, S, L, nb - 1, nb) &&
         same_tile_lines(b, S, L, nb, nb + 1) && same_tile_lines(y, S, L, nb - 1, nb) &&
         same_tile_lines(y, S, L, nb, nb + 1);
}

// Set-resolved A windows across column tiles (gemm_rwma, round r with `act` cores) that
// cannot overflow: with rows of A, Y and the weights on lines of their own and distinct
// matrices, the window from column tile nb to nb+1 holds lines of the round's A, of the
// weight columns of tiles nb and nb+1 and of the round's Y strip of those tiles only; if
// the most lines any set gets from each adds up to at most the ways, no A line misses
// there (speed only). Per nb, whether that holds (false when it cannot be told).
// A full round's rows are round 0's moved by a whole number of lines (a round's P x Mb
// rows of A and of Y span whole lines, e.g. row strides of whole lines): under a modulo
// index its per-set counts are round 0's rotated, so the most lines in a set, hence these
// tests, are those of the first full round (`moved`; kept in `fits_full_round`; speed only).
std::vector<uint8_t> rwma_a_windows_fit(const GemmWork& w, const MatrixView& a, const MatrixView& b,
                                        const MatrixView& y, const SystemDesc& s, int64_t P, int64_t r, int64_t act,
                                        bool moved, std::vector<uint8_t>& fits_full_round) {
  const int64_t S = w.S, NT = w.n / S, L = s.llc.line_bytes, Mb = w.block_rows;
  auto rows_of = [&](int64_t blk) { return std::min(Mb, w.m - blk * Mb); };
  std::vector<uint8_t> a_window_fits(NT, 0);
  const auto extent = [&](const MatrixView& v) {
    return std::pair<int64_t, int64_t>(static_cast<int64_t>(v.addr(0, 0) / L),
                                       static_cast<int64_t>(v.addr(v.rows - 1, v.cols - 1) / L));
  };
  auto disjoint = [](std::pair<int64_t, int64_t> x, std::pair<int64_t, int64_t> z) {
    return x.second < z.first || z.second < x.first;
  };
  const bool can_skip = a.panel_width == 0 && y.panel_width == 0 && b.panel_width == 0 && a.row_stride >= L &&
                        y.row_stride >= L && b.row_stride >= L && disjoint(extent(a), extent(y)) &&
                        disjoint(extent(a), extent(b)) && disjoint(extent(y), extent(b));
  if (!can_skip) return a_window_fits;
  if (moved && !fits_full_round.empty()) return fits_full_round;
  const int64_t sets = s.llc.sets();
  const SetIndex set_of(s.llc);
  SetTally tally(set_of, sets);
  std::vector<Sweep> av, yv;
  for (int64_t c2 = 0; c2 < act; ++c2) {
    const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
    const auto v = strip_sweeps(a, q0, qn, 0, a.cols, L);
    av.insert(av.end(), v.begin(), v.end());
  }
  const int32_t most_a = most_lines_in_a_set(av, L, tally);
  // Shapes (speed only): under a modulo index, the Y strip (or weight columns) of column
  // tiles nb and nb' are the same lines moved by a whole number of lines (every row alike),
  // so their per-set counts are rotated and the fullest set is the same, when they have as
  // many columns and
  //  - with row strides of whole lines, row 0 spans as many lines (`shapes_rotate`);
  //  - with any row strides, they start at the same byte of a line (their columns are a
  //    whole number of lines apart, so every row's bytes, hence lines, are moved alike).
  // Counted once per shape, exactly (an exact count decides the tests as the stopped ones do).
  const bool modulo = !s.llc.hashed_index;
  const bool shapes_rotate = modulo && y.row_stride % L == 0 && b.row_stride % L == 0;
  struct Shape {
    int64_t key, cols;  // key: row 0's lines (shapes_rotate), else its first byte in a line
    int32_t most;
  };
  std::vector<Shape> y_shapes, w_shapes;
  auto by_shape = [&](std::vector<Shape>& shapes, const MatrixView& v, int64_t c0, int64_t nc, auto&& count_most) {
    const uint64_t lo = v.addr(0, c0);
    const int64_t key = shapes_rotate ? static_cast<int64_t>((lo + nc * v.elem - 1) / L - lo / L + 1)
                                      : static_cast<int64_t>(lo % L);
    for (const auto& sh : shapes)
      if (sh.key == key && sh.cols == nc) return sh.most;
    shapes.push_back({key, nc, count_most(std::numeric_limits<int32_t>::max())});
    return shapes.back().most;
  };
  for (int64_t nb = 0; nb + 1 < NT; ++nb) {
    if (column_tiles_alike(b, y, S, L, NT, nb)) {
      a_window_fits[nb] = a_window_fits[nb - 1];
      continue;
    }
    if (most_a > s.llc.ways) continue;  // a_window_fits[nb] stays false
    const int64_t ny = std::min(2 * S, y.cols - nb * S), nw = std::min(2 * S, b.cols - nb * S);
    auto y_most = [&](int32_t limit) {
      yv.clear();
      for (int64_t c2 = 0; c2 < act; ++c2) {
        const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
        const auto v = strip_sweeps(y, q0, qn, nb * S, ny, L);
        yv.insert(yv.end(), v.begin(), v.end());
      }
      return most_lines_in_a_set(yv, L, tally, limit);
    };
    auto w_most = [&](int32_t limit) {
      return most_lines_in_a_set(block_sweeps(b, 0, b.rows, nb * S, nw), L, tally, limit);
    };
    // The Y and weight counts stop once they leave no room (the test fails either way);
    // under a modulo index they are exact, once per shape.
    const int32_t room_a = static_cast<int32_t>(s.llc.ways) - most_a;
    const int32_t most_ay =
        most_a + (modulo ? by_shape(y_shapes, y, nb * S, ny, y_most) : y_most(room_a));
    a_window_fits[nb] =
        most_ay <= s.llc.ways &&
        most_ay + (modulo ? by_shape(w_shapes, b, nb * S, nw, w_most)
                                 : w_most(static_cast<int32_t>(s.llc.ways) - most_ay)) <=
            s.llc.ways;
  }
  if (moved) fits_full_round = a_window_fits;
  return a_window_fits;
}

// The lines of a run of alike column tiles (the same lines every time, re-read `times`
// times in a row).
struct TileRun {
  std::vector<Sweep> lines;
  int64_t times = 1;
};

// Set-resolved: the window of A's line strip j (k-tiles kb0..kb1) from column tile nb
// to nb+1 holds the round's A (`a_round`), the weight rows of tile nb after kb1 and of tile
// nb+1 up to kb0, and the round's Y of both tiles; its sets shift with j and nb. The window
// is the same for every core; per core of round r, the lines that miss, as runs of alike
// column tiles. Tiles whose window fits (rwma_a_windows_fit) have no strip to decide.
std::vector<std::vector<TileRun>> rwma_a_tile_misses(const GemmWork& w, const MatrixView& a, const MatrixView& b,
                                                     const MatrixView& y, const SystemDesc& s, int64_t P, int64_t r,
                                                     int64_t act, const SetLoad& a_round,
                                                     const std::vector<uint8_t>& a_window_fits) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, e = a.elem, Mb = w.block_rows;
  auto rows_of = [&](int64_t blk) { return std::min(Mb, w.m - blk * Mb); };
  std::vector<std::vector<TileRun>> a_tile_miss(act);
  const bool b_apart = rows_apart(b, L);
  const int64_t per_line = std::max<int64_t>(1, L / e);  // columns per A line
  std::optional<SetLoad> win;  // the window of the current strip, its storage kept across column tiles
  for (int64_t nb = 0; nb + 1 < NT; ++nb) {
    if (column_tiles_alike(b, y, S, L, NT, nb)) {
      for (auto& runs : a_tile_miss) runs.back().times += 1;
      continue;
    }
    for (auto& runs : a_tile_miss) runs.emplace_back();
    // From strip j to j+1 the window loses the weight rows of tile nb that strip j+1's
    // k-tiles take from "after" and gains those of tile nb+1 up to them: with weight rows
    // in lines of their own, a block's per-set load is the sum of its rows' lines, so the
    // window is moved row by row instead of rebuilt (speed only).
    bool have_win = false;  // `win` holds this column tile's window of the last strip
    int64_t win_after = 0, win_upto = 0;
    auto move_rows = [&](int64_t q0, int64_t q1, int64_t tile, double d) {
      const PanelRows rows(b, tile * S, std::min(S, b.cols - tile * S), L);
      for (int64_t q = q0; q < q1; ++q)
        for (int64_t l = rows.first_line(q), l1 = rows.last_line(q); l <= l1; ++l) win->add_line(l, d);
    };
    for (int64_t j = 0; !a_window_fits[nb] && j * per_line < a.cols; ++j) {
      const int64_t kb0 = j * per_line / S, kb1 = std::min(KT - 1, ((j + 1) * per_line - 1) / S);
      const int64_t after = std::min(b.rows, (kb1 + 1) * S), upto = std::min(b.rows, (kb0 + 1) * S);
      if (have_win && b_apart) {
        move_rows(win_after, after, nb, -1.0);
        move_rows(win_upto, upto, nb + 1, 1.0);
      } else {
        win = a_round;  // assigned in place once engaged: its storage reused (speed only)
        have_win = true;
        win->add(block_sweeps(b, after, b.rows - after, nb * S, std::min(S, b.cols - nb * S)));
        win->add(block_sweeps(b, 0, upto, (nb + 1) * S, std::min(S, b.cols - (nb + 1) * S)));
        for (int64_t c2 = 0; c2 < act; ++c2) {
          const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
          win->add(strip_sweeps(y, q0, qn, nb * S, std::min(2 * S, y.cols - nb * S), L));
        }
      }
      win_after = after, win_upto = upto;
      const int64_t c0 = j * per_line, nc = std::min(per_line, a.cols - c0);
      for (int64_t c2 = 0; c2 < act; ++c2) {
        const auto miss = win->overflowing_reads(strip_sweeps(a, (r * P + c2) * Mb, rows_of(r * P + c2), c0, nc, L));
        auto& into = a_tile_miss[c2].back().lines;
        into.insert(into.end(), miss.begin(), miss.end());
      }
    }
  }
  return a_tile_miss;
}

// The Y block of core c (rows [r0, r0 + nr)): read-modify-written once, then the lines in
// sets a k-step overflows once per k-tile of every column tile: set-resolved, the lines
// `k_miss` lists (with the A lines that miss from one k-step to the next); uniform, the
// share fY of every column tile's lines in overflowing sets of the Y window `win_y`.
void rwma_y_traffic(const GemmWork& w, const MatrixView& y, const SystemDesc& s, int64_t c, int64_t r0, int64_t nr,
                    const SetLoad& win_y, double fY, const KStepMisses& k_miss, DramStreams& dram) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes;
  if (!win_y.uniform()) {
    // Set-resolved (rwma_k_steps): read once, then the lines that miss at later
    // k-steps; write-backs: each evicted version, then the last one.
    auto ystrips = strip_sweeps(y, r0, nr, 0, y.cols, L);
    dram.sweeps(w.y_name, false, c, ystrips);
    dram.sweeps(w.y_name, false, c, k_miss.y[c]);
    dram.sweeps(w.y_name, true, c, k_miss.y[c]);
    dram.sweeps(w.y_name, true, c, ystrips);
    dram.sweeps(w.a_name, false, c, k_miss.a[c]);
    return;
  }
  // Lines that stay: read and written once.
  auto strips = [&] {
    auto ystrips = strip_sweeps(y, r0, nr, 0, y.cols, L);
    dram.sweeps(w.y_name, false, c, ystrips);
    dram.sweeps(w.y_name, true, c, ystrips);
  };
  // Lines in overflowing sets: fetched and written back by every column tile that touches
  // them, and again at each later k-tile. Every column tile does what the previous one did,
  // one tile to the right (the last one may be narrower).
  auto tile = [&](int64_t nb) {
    auto yv = block_sweeps(y, r0, nr, nb * S, std::min(S, y.cols - nb * S));
    dram.repeat(w.y_name, false, c, yv, 1);
    dram.repeat(w.y_name, true, c, yv, 1);
    dram.repeat(w.y_name, false, c, yv, KT - 1);
    dram.repeat(w.y_name, true, c, yv, KT - 1);
  };
  auto tiles = [&] {
    dram.translated(NT - 1, tile);
    tile(NT - 1);
  };
  // The capacity test: all or none; a spread window (setload.h): the share fY of each.
  if (fY <= 0) return strips();
  if (fY >= 1) return tiles();
  dram.thinned(w.y_name, c, 1 - fY, strips);
  dram.thinned(w.y_name, c, fY, tiles);
}

}  // namespace

// Weight-stationary GEMM over row-major data with sequence blocks (cache tiling).
// Every reuse decision is taken per LLC set (setload.h): the lines of an operand that miss
// at a reuse are those in sets where the window between two uses holds more distinct lines
// than the ways; with one set (fully associative) this is the capacity test footprint <= C.
void gemm_rwma(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
               const SystemDesc& s, int64_t P, DramStreams& dram, Traffic& t) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, C = s.llc.lines();
  const int64_t C1 = s.l1.lines(), e = a.elem;
  const int64_t Mb = w.block_rows, MB = (w.m + Mb - 1) / Mb, R = (MB + P - 1) / P;
  auto rows_of = [&](int64_t blk) { return std::min(Mb, w.m - blk * Mb); };
  const int64_t two = std::min<int64_t>(2 * S, b.cols);
  const int64_t Ablk = lines(a, 0, rows_of(0), 0, a.cols, L);
  const int64_t Wall = lines(b, 0, b.rows, 0, b.cols, L);
  const int64_t Wp2 = lines(b, 0, b.rows, 0, two, L);               // two neighbouring column tiles
  const int64_t Ys2 = lines(y, 0, rows_of(0), 0, std::min<int64_t>(2 * S, y.cols), L);
  const int64_t Yblk = lines(y, 0, rows_of(0), 0, y.cols, L);
  const int64_t per_line_y = std::max<int64_t>(1, L / (S * e));
  const int64_t per_line_w = std::max<int64_t>(1, L / (S * e));
  // An A line spans `tpl` k-tiles: between its last use for one column tile and its first
  // for the next, KT - tpl + 1 k-steps run: that share of the weight panel.
  const int64_t tpl = std::min<int64_t>(KT, std::max<int64_t>(1, L / (S * e)));
  const int64_t b_rows_between = std::min<int64_t>(b.rows, (KT - tpl + 1) * S);
  auto set_load = [&](const std::vector<Sweep>& v) {
    SetLoad l(s.llc);
    l.add(v);
    return l;
  };
  auto frac = [](const SetLoad& mine, const SetLoad& window) {
    const double tot = mine.total();
    return tot > 0 ? mine.lines_over(window) / tot : 0.0;
  };
  const SetLoad b_two_between = set_load(strip_sweeps(b, 0, b_rows_between, 0, two, L));
  const SetLoad b_tile = set_load(block_sweeps(b, 0, std::min(S, b.rows), 0, std::min(S, b.cols)));

  std::vector<uint8_t> fits_full_round;  // a_window_fits of the first full round (rwma_a_windows_fit)
  // Round r's rows of A and Y are round 0's moved by whole lines (P x Mb rows span whole
  // lines), so under a modulo index the per-set counts of a full round are the first full
  // round's rotated: the skip bounds (most lines in a set) of full rounds are the same.
  const bool full_rounds_rotate = !s.llc.hashed_index && a.panel_width == 0 && y.panel_width == 0 &&
                                  (P * Mb * a.row_stride) % L == 0 && (P * Mb * y.row_stride) % L == 0;
  KStepBounds k_bounds;  // the k-step skip bounds of the first full round (KStepWindows)
  WeightTileBounds w_tiles;  // the weight tiles' fullest sets, for every round (KStepWindows)
  for (int64_t r = 0; r < R; ++r) {
    const int64_t act = std::min(P, MB - r * P);
    // Set footprints of this round's blocks: all of A, the first two column tiles of Y
    // (line-sharing neighbours), the first k strip of A and column tile of Y (one k-step).
    std::vector<SetLoad> a_blk, y_tile;
    SetLoad a_round(s.llc), y_two(s.llc), a_strip(s.llc);
    for (int64_t c = 0; c < act; ++c) {
      const int64_t blk = r * P + c, r0 = blk * Mb, nr = rows_of(blk);
      a_blk.push_back(set_load(strip_sweeps(a, r0, nr, 0, a.cols, L)));
      a_round.add(a_blk.back());
      y_two.add(set_load(strip_sweeps(y, r0, nr, 0, std::min<int64_t>(2 * S, y.cols), L)));
      a_strip.add(set_load(block_sweeps(a, r0, nr, 0, std::min(S, a.cols))));
      y_tile.push_back(set_load(block_sweeps(y, r0, nr, 0, std::min(S, y.cols))));
    }
    // Reuse window of an A line across neighbouring column tiles (FA): all of the round's
    // A, the weight rows of the k-steps in between, two column tiles of the round's Y.
    SetLoad win_a = a_round;
    win_a.add(b_two_between);
    win_a.add(y_two);
    // Reuse window of a Y line across k-tiles (Fk): one k-step of every active core.
    SetLoad win_y = a_strip;
    for (const auto& yt : y_tile) win_y.add(yt);
    win_y.add(b_tile);
    const int64_t Fk = act * (lines(a, 0, rows_of(0), 0, std::min(S, a.cols), L) +
                              lines(y, 0, rows_of(0), 0, std::min(S, y.cols), L)) +
                       lines(b, 0, std::min(S, b.rows), 0, std::min(S, b.cols), L);
    const int64_t FA = act * Ablk + Wp2 * (KT - tpl + 1) / KT + act * Ys2;
    // Set-resolved caches: the Y and A lines that miss from one k-step to the next.
    const bool full = full_rounds_rotate && act == P && (r + 1) * P * Mb <= w.m;
    const KStepMisses k_miss =
        win_y.uniform() ? KStepMisses{} : rwma_k_steps(w, a, b, y, s, P, r, act, full ? &k_bounds : nullptr, w_tiles);
    // Set-resolved: the A windows across column tiles that cannot overflow (speed only),
    // then the A lines that miss across column tiles, per core.
    std::vector<uint8_t> a_window_fits(NT, 0);
    std::vector<std::vector<TileRun>> a_tile_miss(act);
    if (!win_a.uniform()) {
      a_window_fits = rwma_a_windows_fit(w, a, b, y, s, P, r, act, full, fits_full_round);
      a_tile_miss = rwma_a_tile_misses(w, a, b, y, s, P, r, act, a_round, a_window_fits);
    }
    double fA_worst = 0, fY_worst = 0;
    for (int64_t c = 0; c < act; ++c) {
      const int64_t blk = r * P + c, r0 = blk * Mb, nr = rows_of(blk);
      // A block: brought in once, then the lines in overflowing sets re-read per column tile.
      auto astrips = strip_sweeps(a, r0, nr, 0, a.cols, L);
      // The shares of lines in overflowing sets (O(sets) each) feed round 0's text and
      // refetch counts only, and fY the uniform case's traffic (speed only).
      const double fA = r == 0 ? frac(a_blk[c], win_a) : 0.0;
      fA_worst = std::max(fA_worst, fA);
      dram.sweeps(w.a_name, false, c, astrips);
      if (win_a.uniform()) {
        dram.missing(w.a_name, false, c, astrips, NT - 1, win_a);
      } else {
        // Set-resolved (a_tile_miss above): each run's lines, in column tile order. Reads
        // only, so a run repeated is exact (DramStreams::repeat).
        for (const auto& run : a_tile_miss[c])
          if (!run.lines.empty()) dram.repeat(w.a_name, false, c, run.lines, run.times);
      }
      // An A line spans `tpl` k-steps of one column tile: between two of them one k-step
      // of every core runs (the Y window); its lines in sets that overflows miss again.
      if (tpl > 1 && win_y.uniform()) dram.missing(w.a_name, false, c, astrips, NT * (tpl - 1), win_y);
      // Y block: read-modify-written once, the lines in sets a k-step overflows once per
      // k-tile of every column tile.
      const double fY = r == 0 || win_y.uniform() ? frac(y_tile[c], win_y) : 0.0;
      fY_worst = std::max(fY_worst, fY);
      rwma_y_traffic(w, y, s, c, r0, nr, win_y, fY, k_miss, dram);
      // L1: the block's A rows across column tiles, Y lines across the tiles sharing them.
      const int64_t F1 = Ablk + Wp2 + Ys2;
      t.l1_misses[c] += (F1 <= C1 ? Ablk : Ablk * NT) + (F1 <= C1 ? Yblk : Yblk * per_line_y) +
                        (F1 <= C1 ? Wall : Wall * per_line_w);
    }
    if (r == 0) {
      auto& ao = t.operands[w.a_name];
      auto& yo = t.operands[w.y_name];
      ao.refetch = std::max<int64_t>(ao.refetch, fA_worst > 0 ? NT : 1);
      ao.why = fmt::format("block of {} rows re-used across {} column tiles: {}; {:.0f}% of its lines in "
                           "overflowing LLC sets", Mb, NT, fit_text(FA, C), 100 * fA_worst);
      yo.refetch = std::max<int64_t>(yo.refetch, fY_worst > 0 ? KT : 1);
      yo.why = fmt::format("output rows read-modify-written over {} k-tiles, lines shared by "
                           "neighbouring column tiles: {}; {:.0f}% in overflowing sets",
                           KT, fit_text(Fk, C), 100 * fY_worst);
    }
  }
  rwma_weights(w, a, b, y, s, P, dram, t.operands[w.b_name]);
}

}  // namespace bertlab::hw::analytic_detail

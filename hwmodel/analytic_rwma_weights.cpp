// The analytic traffic of the RWMA GEMM's weights (analytic_rwma_detail.h): their reuse
// windows within and across rounds of sequence blocks.
#include <array>
#include <bit>
#include <optional>

#include "hwmodel/analytic_rwma_detail.h"
#include "hwmodel/layout.h"

namespace bertlab::hw::analytic_detail {

namespace {

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
  const int64_t Mb = w.block_rows, MB = ceil_div(w.m, Mb), R = ceil_div(MB, P);
  const int64_t tpg = std::max<int64_t>(1, L / (S * e));  // column tiles per weight line
  const int64_t NG = ceil_div(NT, tpg);
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

}  // namespace

void rwma_weights(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                  const SystemDesc& s, int64_t P, DramStreams& dram, OperandTraffic& bo) {
  WeightWindows(w, a, b, y, s, P, dram).run(bo);
}

}  // namespace bertlab::hw::analytic_detail

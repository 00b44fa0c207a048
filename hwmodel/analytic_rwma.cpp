// The analytic traffic of the RWMA GEMM schedule (work.h): reuse windows of the A blocks
// across column tiles, of Y and A lines across k-steps, and of the weights within and
// across rounds of sequence blocks.
#include <array>
#include <bit>
#include <optional>

#include "hwmodel/analytic_detail.h"

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
// On a uniformly loaded cache (one set or hashed index) the windows depend only on whether
// the group is the first or the last and whether kb is 0, starts an A line or lies inside
// one, so each such class is decided once.
void rwma_weights(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
                  const SystemDesc& s, int64_t P, DramStreams& dram, OperandTraffic& bo) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, e = b.elem;
  const int64_t Mb = w.block_rows, MB = (w.m + Mb - 1) / Mb, R = (MB + P - 1) / P;
  const int64_t tpg = std::max<int64_t>(1, L / (S * e));  // column tiles per weight line
  const int64_t NG = (NT + tpg - 1) / tpg;
  const bool uniform = SetLoad(s.llc).uniform();
  auto rows_of = [&](int64_t blk) { return std::min(Mb, w.m - blk * Mb); };
  // The lines of round q's blocks of `v` in columns [c0, c1).
  auto add_round = [&](SetLoad& into, const MatrixView& v, int64_t q, int64_t c0, int64_t c1) {
    c1 = std::min(c1, v.cols);
    if (q < 0 || c0 >= c1) return;
    for (int64_t blk = q * P; blk < std::min(MB, (q + 1) * P); ++blk)
      into.add(block_sweeps(v, blk * Mb, rows_of(blk), c0, c1 - c0));
  };
  auto group_c0 = [&](int64_t g) { return g * tpg * S; };
  auto group_c1 = [&](int64_t g) { return std::min(b.cols, (g + 1) * tpg * S); };
  SetLoad b_all(s.llc);
  b_all.add(block_sweeps(b, 0, b.rows, 0, b.cols));
  const int64_t read0 = bo.read_lines;
  dram.sweeps(w.b_name, false, 0, strip_sweeps(b, 0, b.rows, 0, b.cols, L));  // round 0's first touch
  for (int64_t r = 0; r < R; ++r) {
    // Within the round: the tiles of a group after its first.
    auto within = [&](int64_t g) {
      SetLoad win(s.llc);
      add_round(win, a, r, 0, a.cols);
      win.add(block_sweeps(b, 0, b.rows, group_c0(g), group_c1(g) - group_c0(g)));
      add_round(win, y, r, group_c0(g), group_c1(g));
      return win;
    };
    if (tpg > 1) {
      const SetLoad first = uniform ? within(0) : SetLoad(s.llc), last = uniform ? within(NG - 1) : SetLoad(s.llc);
      for (int64_t g = 0; g < NG; ++g) {
        const int64_t tiles = std::min(tpg, NT - g * tpg);
        if (tiles <= 1 || group_c0(g) >= b.cols) continue;
        const auto strip = strip_sweeps(b, 0, b.rows, group_c0(g), group_c1(g) - group_c0(g), L);
        dram.missing(w.b_name, false, 0, strip, tiles - 1, uniform ? (g == NG - 1 ? last : first) : within(g));
      }
    }
    if (r == 0) continue;
    // Across rounds: the first tile of each group at every k-step.
    auto across = [&](int64_t g, int64_t kb) {
      const int64_t nb_first = g * tpg, nb_last = std::min(NT, (g + 1) * tpg) - 1;
      SetLoad win = b_all;
      add_round(win, a, r - 1, nb_last < NT - 1 ? 0 : kb * S, a.cols);
      add_round(win, y, r - 1, nb_last * S, y.cols);
      add_round(win, a, r, 0, nb_first > 0 ? a.cols : kb * S);
      add_round(win, y, r, 0, (nb_first + (kb > 0 ? 1 : 0)) * S);
      return win;
    };
    auto tile_rows = [&](int64_t g, int64_t kb0, int64_t kb1) {  // k-tiles [kb0, kb1) of group g
      const int64_t r0 = kb0 * S, r1 = std::min(b.rows, kb1 * S);
      return r0 < r1 ? strip_sweeps(b, r0, r1 - r0, group_c0(g), group_c1(g) - group_c0(g), L) : std::vector<Sweep>{};
    };
    for (int64_t g = 0; g < NG; ++g) {
      if (group_c0(g) >= b.cols) continue;
      if (!uniform) {
        // The window depends on kb only through the column bounds across() takes from it,
        // which stay the same over the k-steps after the first of a group that is neither
        // the first nor the last: a window is rebuilt only when its bounds change (speed
        // only; the counts are unchanged).
        const int64_t nb_first = g * tpg, nb_last = std::min(NT, (g + 1) * tpg) - 1;
        auto bounds = [&](int64_t kb) {
          return std::array<int64_t, 3>{nb_last < NT - 1 ? 0 : kb * S, nb_first > 0 ? a.cols : kb * S,
                                        (nb_first + (kb > 0 ? 1 : 0)) * S};
        };
        std::optional<SetLoad> win;
        std::array<int64_t, 3> win_bounds{};
        for (int64_t kb = 0; kb < KT; ++kb) {
          if (!win || bounds(kb) != win_bounds) win = across(g, kb), win_bounds = bounds(kb);
          dram.missing(w.b_name, false, 0, tile_rows(g, kb, kb + 1), 1, *win);
        }
        continue;
      }
      // Uniform: the class of kb (0, starting an A line, inside one) decides; the groups
      // between the first and the last behave as the second one.
      const int64_t rep = (g == 0 || g == NG - 1) ? g : 1;
      const int64_t kb_line = std::max<int64_t>(1, L / (S * e));  // k-tiles per A line
      auto decide = [&](int64_t kb) { return kb < KT && across(rep, kb).overflowing_uniform(); };
      bool miss[3] = {decide(0), decide(kb_line), decide(1)};  // kb = 0, starting an A line, inside
      if (kb_line >= KT) miss[1] = miss[0];
      if (kb_line == 1) miss[2] = miss[1];
      if (KT == 1) miss[1] = miss[2] = miss[0];
      if (miss[0] == miss[1] && miss[1] == miss[2]) {
        if (miss[0]) dram.sweeps(w.b_name, false, 0, tile_rows(g, 0, KT));
        continue;
      }
      int64_t run = -1;  // first k-tile of the current run of missing tiles
      for (int64_t kb = 0; kb <= KT; ++kb) {
        const bool m = kb < KT && miss[kb == 0 ? 0 : (kb % kb_line == 0 ? 1 : 2)];
        if (m && run < 0) run = kb;
        if (!m && run >= 0) {
          dram.sweeps(w.b_name, false, 0, tile_rows(g, run, kb));
          run = -1;
        }
      }
    }
  }
  const int64_t all = lines_of(block_sweeps(b, 0, b.rows, 0, b.cols), L);
  bo.refetch = std::max<int64_t>(bo.refetch, (bo.read_lines - read0 + all - 1) / std::max<int64_t>(1, all));
  bo.why = fmt::format("{} weight lines read {:.2f} times: shared by the cores of a round, re-used across the {} "
                       "column tiles and {} round(s) of sequence blocks where their reuse windows fit their "
                       "LLC sets", all, static_cast<double>(bo.read_lines - read0) / std::max<int64_t>(1, all), NT, R);
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
    // Set-resolved caches: the Y and A lines of each core's block that miss from one k-step
    // to the next (kb-1 to kb of a column tile; the last of tile nb-1 to the first of nb
    // when they share Y lines). The window of the line of row i: the previous k-step's A
    // and Y rows after i, the weight tile, the next k-step's A and Y rows before i (all
    // blocks of the round), and row i's lines of the other cores on the side of the line's
    // core they were touched on. Rows leave and join it one by one, so each k-step costs
    // O(sets + rows x cores).
    struct KStepMisses {
      std::vector<std::vector<Sweep>> y, a;
    } k_miss;
    if (!win_y.uniform()) {
      k_miss.y.resize(act);
      k_miss.a.resize(act);
      const int64_t sets = s.llc.sets(), ways = s.llc.ways;
      const SetIndex set_of(s.llc);
      auto keep = [&](std::vector<Sweep>& v, int64_t l) {
        const uint64_t at = static_cast<uint64_t>(l) * L;
        if (!v.empty() && v.back().end() == at) v.back().width += L, v.back().stride = v.back().width;
        else v.push_back({at, 1, L, L});
      };
      // Lines are powers of two in practice: a shift instead of a division (speed only).
      const int line_shift = std::has_single_bit(static_cast<uint64_t>(L)) ? std::countr_zero(static_cast<uint64_t>(L)) : -1;
      auto row_lines = [&](std::vector<int64_t>& out, const MatrixView& v, int64_t m, int64_t tile) {  // lines of row m of a tile
        out.clear();
        const int64_t c0 = tile * S, n = std::min(S, v.cols - c0);
        const uint64_t lo = v.addr(m, c0), hi = lo + n * v.elem - 1;
        const uint64_t l1 = line_shift >= 0 ? hi >> line_shift : hi / L;
        for (uint64_t l = line_shift >= 0 ? lo >> line_shift : lo / L; l <= l1; ++l) out.push_back(static_cast<int64_t>(l));
      };
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
      const bool can_skip = a.panel_width == 0 && y.panel_width == 0 && b.panel_width == 0 && a.row_stride >= L &&
                            y.row_stride >= L && b.row_stride >= L && disjoint(ea, ey) && disjoint(ea, eb) && disjoint(ey, eb);
      std::vector<int32_t> count(can_skip ? sets : 0, 0);
      std::vector<int64_t> touched, lines_p, lines_c;
      // The most distinct lines in one set of the union of tile t1 and t2 of `v` over the
      // round's rows (t1 == t2: one tile).
      auto max_union = [&](const MatrixView& v, int64_t t1, int64_t t2) {
        int32_t most = 0;
        touched.clear();
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
        return most;
      };
      auto max_weight_tile = [&](int64_t kb, int64_t nb) {
        int32_t most = 0;
        touched.clear();
        for (int64_t kr = 0; kr < S && kb * S + kr < b.rows; ++kr) {
          row_lines(lines_p, b, kb * S + kr, nb);
          for (int64_t l : lines_p) most = tally_line(l, set_of, count, touched, most);
        }
        for (int64_t st : touched) count[st] = 0;
        return most;
      };
      std::vector<int32_t> max_a(can_skip ? KT : 0);
      for (int64_t kb = 0; kb < static_cast<int64_t>(max_a.size()); ++kb) max_a[kb] = max_union(a, kb > 0 ? kb - 1 : KT - 1, kb);
      SetLoad win(s.llc), empty(s.llc);
      std::vector<std::vector<int64_t>> ap(act), yp(act), ac(act), yc(act);
      std::vector<int64_t> same_set;
      for (int64_t nb = 0; nb < NT; ++nb) {
        const int32_t y_tile = can_skip ? max_union(y, nb, nb) : 0;
        const int32_t y_pair = can_skip && nb > 0 ? max_union(y, nb - 1, nb) : 0;
        for (int64_t kb = 0; kb < KT; ++kb) {
          // k-step 0 re-uses a Y line only when the column tile starts inside a line of the
          // previous one (S*e < line); an A line only after its first k-tile.
          const bool y_again = kb > 0 || (nb * S * e) % L != 0;
          const bool a_again = (kb * S * e) % L != 0;
          if (!y_again && !a_again) continue;
          if (can_skip && (kb > 0 ? y_tile : y_pair) + max_a[kb] + max_weight_tile(kb, nb) <= ways) continue;
          const int64_t nbp = kb > 0 ? nb : nb - 1, kbp = kb > 0 ? kb - 1 : KT - 1;
          win = empty;
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
                  if (overflows(c, l, false)) keep(k_miss.y[c], l);
              if (a_again)
                for (int64_t l : ac[c])
                  if (overflows(c, l, true)) keep(k_miss.a[c], l);
            }
            for (int64_t c2 = 0; c2 < act; ++c2) {
              for (int64_t l : ac[c2]) win.add_line(l, 1);
              for (int64_t l : yc[c2]) win.add_line(l, 1);
            }
          }
        }
      }
    }
    // Set-resolved A windows across column tiles (below) that cannot overflow: with rows of
    // A, Y and the weights on lines of their own and distinct matrices, the window from
    // column tile nb to nb+1 holds lines of the round's A, of the weight columns of tiles
    // nb and nb+1 and of the round's Y strip of those tiles only; if the most lines any set
    // gets from each adds up to at most the ways, no A line misses there (speed only).
    std::vector<uint8_t> a_window_fits(NT, 0);
    if (!win_a.uniform()) {
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
      if (can_skip) {
        const int64_t sets = s.llc.sets();
        const SetIndex set_of(s.llc);
        std::vector<int32_t> count(sets, 0);
        std::vector<int64_t> touched;
        std::vector<Sweep> av, yv;
        for (int64_t c2 = 0; c2 < act; ++c2) {
          const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
          const auto v = strip_sweeps(a, q0, qn, 0, a.cols, L);
          av.insert(av.end(), v.begin(), v.end());
        }
        const int32_t most_a = most_lines_in_a_set(av, L, set_of, count, touched);
        for (int64_t nb = 0; nb + 1 < NT; ++nb) {
          yv.clear();
          for (int64_t c2 = 0; c2 < act; ++c2) {
            const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
            const auto v = strip_sweeps(y, q0, qn, nb * S, std::min(2 * S, y.cols - nb * S), L);
            yv.insert(yv.end(), v.begin(), v.end());
          }
          const auto wv = block_sweeps(b, 0, b.rows, nb * S, std::min(2 * S, b.cols - nb * S));
          a_window_fits[nb] = most_a + most_lines_in_a_set(yv, L, set_of, count, touched) +
                                  most_lines_in_a_set(wv, L, set_of, count, touched) <=
                              s.llc.ways;
        }
      }
    }
    double fA_worst = 0, fY_worst = 0;
    for (int64_t c = 0; c < act; ++c) {
      const int64_t blk = r * P + c, r0 = blk * Mb, nr = rows_of(blk);
      // A block: brought in once, then the lines in overflowing sets re-read per column tile.
      auto astrips = strip_sweeps(a, r0, nr, 0, a.cols, L);
      const double fA = frac(a_blk[c], win_a);
      fA_worst = std::max(fA_worst, fA);
      dram.sweeps(w.a_name, false, c, astrips);
      if (win_a.uniform()) {
        dram.missing(w.a_name, false, c, astrips, NT - 1, win_a);
      } else {
        // Set-resolved: the window of A's line strip j (k-tiles kb0..kb1) from column tile
        // nb to nb+1 holds the round's A, the weight rows of tile nb after kb1 and of tile
        // nb+1 up to kb0, and the round's Y of both tiles; its sets shift with j and nb.
        const int64_t per_line = std::max<int64_t>(1, L / e);  // columns per A line
        for (int64_t nb = 0; nb + 1 < NT; ++nb)
          for (int64_t j = 0; !a_window_fits[nb] && j * per_line < a.cols; ++j) {
            const int64_t kb0 = j * per_line / S, kb1 = std::min(KT - 1, ((j + 1) * per_line - 1) / S);
            SetLoad win = a_round;
            const int64_t after = std::min(b.rows, (kb1 + 1) * S), upto = std::min(b.rows, (kb0 + 1) * S);
            win.add(block_sweeps(b, after, b.rows - after, nb * S, std::min(S, b.cols - nb * S)));
            win.add(block_sweeps(b, 0, upto, (nb + 1) * S, std::min(S, b.cols - (nb + 1) * S)));
            for (int64_t c2 = 0; c2 < act; ++c2) {
              const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
              win.add(strip_sweeps(y, q0, qn, nb * S, std::min(2 * S, y.cols - nb * S), L));
            }
            const int64_t c0 = j * per_line, nc = std::min(per_line, a.cols - c0);
            dram.missing(w.a_name, false, c, strip_sweeps(a, r0, nr, c0, nc, L), 1, win);
          }
      }
      // An A line spans `tpl` k-steps of one column tile: between two of them one k-step
      // of every core runs (the Y window); its lines in sets that overflows miss again.
      if (tpl > 1 && win_y.uniform()) dram.missing(w.a_name, false, c, astrips, NT * (tpl - 1), win_y);
      // Y block: read-modify-written once, the lines in sets a k-step overflows once per
      // k-tile of every column tile.
      const double fY = frac(y_tile[c], win_y);
      fY_worst = std::max(fY_worst, fY);
      if (!win_y.uniform()) {
        // Set-resolved (k_step_misses below): read once, then the lines that miss at later
        // k-steps; write-backs: each evicted version, then the last one.
        auto ystrips = strip_sweeps(y, r0, nr, 0, y.cols, L);
        dram.sweeps(w.y_name, false, c, ystrips);
        dram.sweeps(w.y_name, false, c, k_miss.y[c]);
        dram.sweeps(w.y_name, true, c, k_miss.y[c]);
        dram.sweeps(w.y_name, true, c, ystrips);
        dram.sweeps(w.a_name, false, c, k_miss.a[c]);
      } else if (fY <= 0) {
        auto ystrips = strip_sweeps(y, r0, nr, 0, y.cols, L);
        dram.sweeps(w.y_name, false, c, ystrips);
        dram.sweeps(w.y_name, true, c, ystrips);
      } else {
        // Every column tile does what the previous one did, one tile to the right (the
        // last one may be narrower).
        auto tile = [&](int64_t nb) {
          auto yv = block_sweeps(y, r0, nr, nb * S, std::min(S, y.cols - nb * S));
          dram.repeat(w.y_name, false, c, yv, 1);
          dram.repeat(w.y_name, true, c, yv, 1);
          dram.missing(w.y_name, false, c, yv, KT - 1, win_y);
          dram.missing(w.y_name, true, c, yv, KT - 1, win_y);
        };
        dram.translated(NT - 1, tile);
        tile(NT - 1);
      }
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

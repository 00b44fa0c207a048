// The analytic traffic of the RWMA GEMM schedule (work.h): reuse windows of the A blocks
// across column tiles, of Y and A lines across k-steps, and of the weights within and
// across rounds of sequence blocks.
// The weights' windows are in analytic_rwma_weights.cpp, the k-steps' in
// analytic_rwma_ksteps.cpp (analytic_rwma_detail.h); here the A blocks across column tiles,
// Y's traffic and the driver, gemm_rwma.
#include <array>
#include <bit>
#include <optional>

#include "hwmodel/analytic_rwma_detail.h"
#include "hwmodel/layout.h"

namespace bertlab::hw::analytic_detail {

namespace {

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
  const int64_t Mb = w.block_rows, MB = ceil_div(w.m, Mb), R = ceil_div(MB, P);
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

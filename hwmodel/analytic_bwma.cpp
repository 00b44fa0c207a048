// The analytic traffic of the BWMA GEMM schedule (work.h): reuse windows of the output
// panels across k-tiles and of the input panels across rounds of output panels.
//
// One class, BwmaTraffic, holds what every window of one GEMM shares (the operands, the input
// panels' sweeps and line counts, the running set tally); its parts are named after the reuse
// they decide, in the order gemm_bwma runs them (the DRAM streams keep that order):
//   - input panels across rounds of output panels: input_panels(), with the uniform windows
//     (a_refetch) or the set-resolved ones, one round pair at a time (InputRoundWindows);
//   - output panels across k-tiles: output_panels_resolved() (y_misses, per LLC set) or
//     output_panels_uniform();
//   - the private L1: l1_misses().
#include <algorithm>
#include <optional>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/layout.h"

namespace bertlab::hw::analytic_detail {

namespace {

using RowGroups = std::vector<std::pair<int64_t, int64_t>>;

class BwmaTraffic {
 public:
  BwmaTraffic(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y, const SystemDesc& s,
              int64_t P, DramStreams& dram, Traffic& t, int64_t c0);
  void run() {
    input_panels();
    output_panels();
    l1_misses();
  }

 private:
  friend class InputRoundWindows;
  // Columns of the tile at column c of v (the last tile may be narrower).
  int64_t cw(const MatrixView& v, int64_t c) const { return std::min(S, v.cols - c); }
  void tally_range(uint64_t lo, uint64_t hi) { tally.add_bytes(lo, hi, L); }  // the lines of the bytes [lo, hi]
  // Rows [r0, r0+nr) of the columns [c, c+cw) of v: inside one panel with contiguous rows
  // the one run block_sweeps makes of them (counted without building it), else its sweeps.
  bool one_run(const MatrixView& v, int64_t c) const {
    return v.panel_width > 0 && (c + v.col0) % v.panel_width + cw(v, c) <= v.panel_width &&
           v.row_stride == cw(v, c) * v.elem;
  }
  void tally_block(const MatrixView& v, int64_t r0, int64_t nr, int64_t c) {
    if (nr <= 0 || cw(v, c) <= 0) return;
    if (one_run(v, c)) {
      const uint64_t lo = v.addr(r0, c);
      tally_range(lo, lo + nr * cw(v, c) * v.elem - 1);
      return;
    }
    for (const auto& sw : block_sweeps(v, r0, nr, c, cw(v, c))) tally.add_sweep(sw, L);
  }
  int32_t take_most() { return tally.take_most(); }
  RowGroups row_groups(int64_t kb) const;
  void input_panel_bounds();
  int64_t a_footprint(int64_t act, int64_t next, int64_t kb) const {
    return A + act * w_after[kb] + next * w_upto[kb] + act * Yp + (kb > 0 ? next * Yp : 0);
  }
  std::vector<Sweep> a_refetch(int64_t act, int64_t next) const;
  void input_panels();
  void input_rounds_resolved();
  SetLoad input_panels_once() const;
  void output_panels();
  SetLoad y_window(int64_t round) const;
  std::vector<std::vector<std::vector<Sweep>>> y_misses(int64_t r, int64_t act);
  void output_panels_resolved();
  void output_panels_uniform();
  void l1_misses();

  const GemmWork& w;
  const MatrixView &a, &b, &y;
  const SystemDesc& s;
  const int64_t P;
  DramStreams& dram;
  Traffic& t;
  const int64_t c0;
  const int64_t S, KT, NT, L, C, C1;
  const BlockOf line_of;  // an address's line
  std::vector<std::vector<Sweep>> a_panel;
  std::vector<int64_t> a_lines;
  int64_t A = 0;
  // Skipping windows that cannot overflow (speed only; the counts are unchanged). Every
  // set-resolved window below is a sum of SetLoads of sweeps (output panels, input panels,
  // weight tiles or panels), plus lines added row group by row group, less lines removed.
  // Per set it holds at most what SetTally::add_sweep counts for each part (analytic_detail.h); if
  // the fullest set of each part adds up to at most the ways, no line of that window
  // misses. No assumption on alignment or on distinct matrices: shared lines are counted
  // in every part, as SetLoad counts them.
  const int64_t sets;
  const SetIndex set_of;
  const bool resolved;
  SetTally tally;  // the running tally
  // Per input panel: its fullest set, and that of the lines its row groups add one group
  // at a time (a line shared by two groups counted twice).
  std::vector<int32_t> max_a, max_rows;
  int32_t max_a_all = 0;
  int64_t Wt = 0, Wp = 0, Yp = 0, Ap = 0, R = 0, a_last = 0;
  // Weight lines of one panel's tiles after kb and up to kb (narrow tiles share lines).
  std::vector<int64_t> w_after, w_upto;
  OperandTraffic *ao = nullptr, *bo = nullptr, *yo = nullptr;
  // y_misses' scratch, kept across rounds (speed only): the round's output panel columns, the
  // weight tile bounds, the window.
  std::vector<PanelRows> y_rows;
  std::vector<int32_t> w_most_at;
  std::optional<SetLoad> win_scratch;
};

BwmaTraffic::BwmaTraffic(const GemmWork& w_, const MatrixView& a_, const MatrixView& b_, const MatrixView& y_,
                         const SystemDesc& s_, int64_t P_, DramStreams& dram_, Traffic& t_, int64_t c0_)
    : w(w_), a(a_), b(b_), y(y_), s(s_), P(P_), dram(dram_), t(t_), c0(c0_),
      S(w_.S), KT(w_.k / w_.S), NT(w_.n / w_.S), L(s_.llc.line_bytes), C(s_.llc.lines()), C1(s_.l1.lines()),
      line_of(s_.llc.line_bytes), a_panel(static_cast<size_t>(KT)), a_lines(static_cast<size_t>(KT)),
      sets(s_.llc.sets()), set_of(s_.llc), resolved(SetLoad::resolves_sets(s_.llc)), tally(set_of, resolved ? sets : 0),
      w_most_at(static_cast<size_t>(s_.llc.line_bytes)) {
  for (int64_t kb = 0; kb < KT; ++kb) {
    a_panel[kb] = block_sweeps(a, 0, w.m, kb * S, cw(a, kb * S));
    a_lines[kb] = lines_of(a_panel[kb], L);
    A += a_lines[kb];
  }
  input_panel_bounds();
  Wt = lines(b, 0, std::min(S, b.rows), 0, cw(b, 0), L);  // one weight tile
  Wp = lines(b, 0, b.rows, 0, cw(b, 0), L);               // one weight panel
  Yp = lines(y, 0, w.m, 0, cw(y, 0), L);                  // one output panel
  Ap = a_lines[0];
  R = ceil_div(NT, P), a_last = NT - (R - 1) * P;
  // Input panel kb: re-used by the next round of output panels if everything touched in
  // between fits: all of A, one weight panel per core (tiles after kb in this round, up to
  // kb in the next), this round's output panels, and the next round's from kb = 1 on.
  w_after.resize(static_cast<size_t>(KT));
  w_upto.resize(static_cast<size_t>(KT));
  for (int64_t kb = 0; kb < KT; ++kb) {
    const int64_t split = std::min(b.rows, (kb + 1) * S);
    w_after[kb] = lines(b, split, b.rows - split, 0, cw(b, 0), L);
    w_upto[kb] = lines(b, 0, split, 0, cw(b, 0), L);
  }
}

// The row groups of input panel kb (the rows whose first byte lies in one line), as the
// set-resolved windows walk them.
RowGroups BwmaTraffic::row_groups(int64_t kb) const {
  RowGroups g;
  const PanelRows rows(a, kb * S, cw(a, kb * S), L);  // a.addr(m, kb * S) / L, by a shift (speed only)
  for (int64_t m0 = 0; m0 < w.m;) {
    const int64_t line = rows.first_line(m0);
    int64_t m1 = m0;
    while (m1 + 1 < w.m && rows.first_line(m1 + 1) == line) ++m1;
    g.emplace_back(m0, m1);
    m0 = m1 + 1;
  }
  return g;
}

// Per input panel: its fullest set, and that of the lines its row groups add one group
// at a time (a line shared by two groups counted twice); then all of A's.
void BwmaTraffic::input_panel_bounds() {
  max_a.assign(resolved ? KT : 0, 0);
  max_rows.assign(resolved ? KT : 0, 0);
  for (int64_t kb = 0; kb < static_cast<int64_t>(max_a.size()); ++kb) {
    for (const auto& sw : a_panel[kb]) tally.add_sweep(sw, L);
    max_a[kb] = take_most();
    for (const auto& [m0, m1] : row_groups(kb))
      tally_range(a.addr(m0, kb * S), a.addr(m1, kb * S) + cw(a, kb * S) * a.elem - 1);
    max_rows[kb] = take_most();
  }
  if (resolved) {
    for (const auto& p : a_panel)
      for (const auto& sw : p) tally.add_sweep(sw, L);
    max_a_all = take_most();
  }
}

// Rows of panel kb that miss: for kb = KT-1 only this round's output rows after m are
// still to be touched, for kb = 0 only the next round's rows before m have been: there
// the footprint depends linearly on the row, and the missing rows form one range.
std::vector<Sweep> BwmaTraffic::a_refetch(int64_t act, int64_t next) const {
  std::vector<Sweep> v;
  for (int64_t kb = 0; kb < KT; ++kb) {
    const double base = A + act * w_after[kb] + next * w_upto[kb];
    const double cur = (kb < KT - 1) ? act * Yp : 0, cur_tail = (kb == KT - 1) ? act * Yp : 0;
    const double nxt = (kb > 0) ? next * Yp : 0, nxt_head = (kb == 0) ? next * Yp : 0;
    // footprint(m) = base + cur + nxt + cur_tail * (M - m)/M + nxt_head * m/M
    int64_t lo = w.m, hi = 0;  // rows [lo, hi) miss
    const double f0 = base + cur + nxt + cur_tail, slope = (nxt_head - cur_tail) / w.m;
    if (slope == 0) {
      if (f0 > C) lo = 0, hi = w.m;
    } else {
      // rows with f0 + slope*m > C
      const double mstar = (C - f0) / slope;
      if (slope > 0) lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(mstar)) + 1, 0, w.m), hi = w.m;
      else lo = 0, hi = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(mstar)), 0, w.m);
    }
    if (lo >= hi) continue;
    auto sw = block_sweeps(a, lo, hi - lo, kb * S, cw(a, kb * S));
    v.insert(v.end(), sw.begin(), sw.end());
  }
  return v;
}

// A: round 0 brings every panel in (core 0 touches each line first); the later rounds re-read
// what their windows evict.
void BwmaTraffic::input_panels() {
  ao = &t.operands[w.a_name];
  bo = &t.operands[w.b_name];
  yo = &t.operands[w.y_name];
  for (int64_t kb = 0; kb < KT; ++kb) dram.sweeps(w.a_name, false, c0, a_panel[kb]);
  if (R >= 2 && !SetLoad::resolves_sets(s.llc)) {
    dram.repeat(w.a_name, false, c0, a_refetch(P, P), R - 2);
    dram.sweeps(w.a_name, false, c0, a_refetch(P, a_last));
  } else if (R >= 2) {
    input_rounds_resolved();
  }
  const int64_t worst = a_footprint(P, R >= 2 ? P : 0, KT - 1);
  ao->refetch = std::max<int64_t>(ao->refetch, worst > C ? R : 1);
  ao->why = fmt::format("input panels re-read by each of {} round(s) of {} output panel(s): {}", R,
                        P, fit_text(worst, C));
}

// All of A, each line once: input panels of fewer bytes than a line (M x S x e < L) share
// lines with their neighbours, and adding the panels one by one would count a shared
// line once per panel (a 1-row GEMM then re-read all of A at every k-panel of every round).
SetLoad BwmaTraffic::input_panels_once() const {
  SetLoad a_all(s.llc);
  bool shared = false;
  for (int64_t kb = 0; kb + 1 < KT && !shared; ++kb)
    shared = !a_panel[kb].empty() && !a_panel[kb + 1].empty() &&
             line_of(a_panel[kb].back().end() - 1) >= line_of(a_panel[kb + 1].front().start);
  if (!shared) {
    for (const auto& v : a_panel) a_all.add(v);
    return a_all;
  }
  std::vector<int64_t> ls;
  for (const auto& v : a_panel)
    for (const auto& sw : v)
      for (int64_t i = 0; i < sw.count; ++i)
        for (int64_t l = line_of(sw.start + i * sw.stride), l1 = line_of(sw.start + i * sw.stride + sw.width - 1);
             l <= l1; ++l)
          ls.push_back(l);
  std::sort(ls.begin(), ls.end());
  ls.erase(std::unique(ls.begin(), ls.end()), ls.end());
  for (int64_t l : ls) a_all.add_line(l, 1);
  return a_all;
}

// Set-resolved: the windows of the input panels from round r to r+1 (act output panels in
// round r, next in round r+1), and the lines of A they evict. Every window holds lines of A,
// of the weight panels and of the output panels of rounds r and r+1 only: round r's panels
// as sweeps (kb < KT-1) or as the run of their rows' bytes (kb = KT-1), round r+1's as sweeps
// (kb > 0) or row group by row group of input panel 0 (kb = 0). With panels of one run each
// these are the same lines.
class InputRoundWindows {
 public:
  InputRoundWindows(const BwmaTraffic& g, const SetLoad& a_all, int64_t r, int64_t act, int64_t next)
      : g_(g), a_all_(a_all), r_(r), act_(act), next_(next), mid_(g.s.llc),
        whole_panels_(g.b.panel_width == g.S && g.b.col0 == 0 && g.b.cols % g.S == 0 &&
                      g.b.row_stride == g.S * g.b.elem) {}

  // The lines of A that miss in this round pair, as sweeps. saturated: A alone fills every set
  // past the ways, so every window overflows every set (no window is built).
  std::vector<Sweep> misses(bool saturated, const RowGroups& groups0, const RowGroups& groups_last);

 private:
  // The window of input panel kb, built whole.
  SetLoad window(int64_t kb) const;
  void keep_line(int64_t l);
  // Lines [first, last] of the bytes [x, z) (first > last when empty).
  std::pair<int64_t, int64_t> span(uint64_t x, uint64_t z) const {
    return x < z ? std::pair<int64_t, int64_t>(g_.line_of(x), g_.line_of(z - 1)) : std::pair<int64_t, int64_t>(1, 0);
  }
  // Adds to `mid_` the lines of x that z lacks, n times (x \ z).
  void minus(std::pair<int64_t, int64_t> x, std::pair<int64_t, int64_t> z, double n) {
    if (z.first > z.second) z = {x.second + 1, x.second};  // empty: nothing of x excluded
    for (int64_t l = x.first; l <= std::min(x.second, z.first - 1); ++l) mid_.add_line(l, n);
    for (int64_t l = std::max(x.first, z.second + 1); l <= x.second; ++l) mid_.add_line(l, n);
  }
  // mid_: the lines of `now` that `before` lacks added, those it lost removed.
  void move_span(std::pair<int64_t, int64_t> before, std::pair<int64_t, int64_t> now) {
    minus(before, now, -1);
    minus(now, before, 1);
  }
  void step(int64_t kb);
  // Lines of rows [m0, m1] of output panel nb, each passed to f.
  template <class F>
  void y_lines(int64_t nb, int64_t m0, int64_t m1, F&& f) const {
    const int64_t S = g_.S;
    const uint64_t lo = g_.y.addr(m0, nb * S), hi = g_.y.addr(m1, nb * S) + g_.cw(g_.y, nb * S) * g_.y.elem - 1;
    for (int64_t l = g_.line_of(lo), l1 = g_.line_of(hi); l <= l1; ++l) f(l);
  }

  const BwmaTraffic& g_;
  const SetLoad& a_all_;
  const int64_t r_, act_, next_;
  std::vector<Sweep> miss_;
  // The windows of k-panels 1 .. KT-2 differ only in the weight rows: from kb-1 to kb,
  // round r's panels lose the rows of tile kb and round r+1's gain them. With whole
  // weight panels (contiguous rows) those are runs of lines, so the window is moved
  // line by line instead of rebuilt (speed only; the per-set loads are the same).
  SetLoad mid_;
  const bool whole_panels_;
};

void InputRoundWindows::keep_line(int64_t l) {
  const int64_t L = g_.L;
  const uint64_t at = static_cast<uint64_t>(l) * L;
  if (!miss_.empty() && miss_.back().end() == at) {
    miss_.back().width += L;
    miss_.back().stride = miss_.back().width;
  } else {
    miss_.push_back({at, 1, L, L});
  }
}

SetLoad InputRoundWindows::window(int64_t kb) const {
  const int64_t S = g_.S, P = g_.P, KT = g_.KT;
  const MatrixView &b = g_.b, &y = g_.y;
  SetLoad win = a_all_;
  for (int64_t c = 0; c < act_; ++c) {
    const int64_t nb = r_ * P + c;
    const int64_t after = std::min(b.rows, (kb + 1) * S);  // weight rows of the tiles after kb
    win.add(block_sweeps(b, after, b.rows - after, nb * S, g_.cw(b, nb * S)));
    if (kb < KT - 1) win.add(block_sweeps(y, 0, g_.w.m, nb * S, g_.cw(y, nb * S)));
  }
  for (int64_t c = 0; c < next_; ++c) {
    const int64_t nb = (r_ + 1) * P + c;
    win.add(block_sweeps(b, 0, std::min(b.rows, (kb + 1) * S), nb * S, g_.cw(b, nb * S)));
    if (kb > 0) win.add(block_sweeps(y, 0, g_.w.m, nb * S, g_.cw(y, nb * S)));
  }
  return win;
}

void InputRoundWindows::step(int64_t kb) {  // mid_: from the window of kb-1 to that of kb
  const int64_t S = g_.S, P = g_.P;
  const MatrixView& b = g_.b;
  const int64_t was = std::min(b.rows, kb * S), now = std::min(b.rows, (kb + 1) * S);
  for (int64_t c = 0; c < act_; ++c) {
    const int64_t nb = r_ * P + c;
    const uint64_t end = b.addr(0, nb * S) + b.rows * S * b.elem;
    move_span(span(b.addr(0, nb * S) + was * S * b.elem, end), span(b.addr(0, nb * S) + now * S * b.elem, end));
  }
  for (int64_t c = 0; c < next_; ++c) {
    const int64_t nb = (r_ + 1) * P + c;
    const uint64_t start = b.addr(0, nb * S);
    move_span(span(start, start + was * S * b.elem), span(start, start + now * S * b.elem));
  }
}

std::vector<Sweep> InputRoundWindows::misses(bool saturated, const RowGroups& groups0, const RowGroups& groups_last) {
  const int64_t S = g_.S, P = g_.P, KT = g_.KT, M = g_.w.m;
  const MatrixView& a = g_.a;
  for (int64_t kb = 0; kb < KT; ++kb) {
    if (kb > 0 && kb < KT - 1) {
      if (saturated) {
        const auto over = a_all_.overflowing_lines(g_.a_panel[kb]);
        miss_.insert(miss_.end(), over.begin(), over.end());
        continue;
      }
      if (!whole_panels_) {
        mid_ = window(kb);
      } else if (kb == 1) {
        mid_ = window(1);
      } else {
        step(kb);
      }
      const auto over = mid_.overflowing_lines(g_.a_panel[kb]);
      miss_.insert(miss_.end(), over.begin(), over.end());
      continue;
    }
    const RowGroups& groups = kb == 0 ? groups0 : groups_last;
    if (saturated) {
      for (const auto& [m0, m1] : groups) keep_line(g_.line_of(a.addr(m0, kb * S)));
      continue;
    }
    SetLoad win = window(kb);
    // kb = KT-1: round r's output rows from the line's last row on; kb = 0: round
    // r+1's output rows before the line's first row.
    if (kb == KT - 1)
      for (int64_t c = 0; c < act_; ++c) y_lines(r_ * P + c, 0, M - 1, [&](int64_t l) { win.add_line(l, 1); });
    for (const auto& [m0, m1] : groups) {
      const int64_t line = g_.line_of(a.addr(m0, kb * S));
      if (win.overflowing(line)) keep_line(line);
      if (kb == KT - 1)
        for (int64_t c = 0; c < act_; ++c) y_lines(r_ * P + c, m0, m1, [&](int64_t l) { win.add_line(l, -1); });
      if (kb == 0)
        for (int64_t c = 0; c < next_; ++c) y_lines((r_ + 1) * P + c, m0, m1, [&](int64_t l) { win.add_line(l, 1); });
    }
  }
  return std::move(miss_);
}

// Set-resolved: the same windows per LLC set. From round r to r+1 at k-panel kb: all
// of A, round r's weight tiles after kb and round r+1's up to kb, round r's output
// panels (for kb = KT-1 only from the line's rows on) and round r+1's (for kb = 0 only
// before them). The row-dependent part is added and removed line group by line group.
void BwmaTraffic::input_rounds_resolved() {
  const SetLoad a_all = input_panels_once();
  // The row groups of the first and last k-panels, which every round walks (made once; speed only).
  const auto groups0 = row_groups(0), groups_last = row_groups(KT - 1);
  // A alone fills every set past the ways (A larger than the LLC): every window holds A,
  // so every one of them overflows every set, and each round misses the same lines (all
  // of each k-panel 1 .. KT-2, the first line of each row group of the others). That
  // list is made once and repeated (reads: the rounds after the first open the same rows).
  const bool saturated = a_all.min_load() > s.llc.ways + 1e-9;
  for (int64_t r = 0; r + 1 < R; ++r) {
    const int64_t act = P, next = (r + 2 == R) ? a_last : P;
    if (!saturated) {
      // The fullest sets of the round pair's weight panels and output panels: a window that
      // cannot overflow is skipped.
      for (int64_t nb = r * P; nb < (r + 1) * P + next; ++nb) tally_block(b, 0, b.rows, nb * S);
      const int32_t max_w = take_most();
      for (int64_t nb = r * P; nb < (r + 1) * P + next; ++nb) {
        const int64_t c = nb * S;
        if (nb >= (r + 1) * P)
          for (const auto& [m0, m1] : groups0) tally_range(y.addr(m0, c), y.addr(m1, c) + cw(y, c) * y.elem - 1);
        else
          tally_range(y.addr(0, c), y.addr(w.m - 1, c) + cw(y, c) * y.elem - 1);
        if (!one_run(y, c)) tally_block(y, 0, w.m, c);
      }
      if (max_a_all + max_w + take_most() <= s.llc.ways) continue;
    }
    const std::vector<Sweep> miss = InputRoundWindows(*this, a_all, r, act, next).misses(saturated, groups0, groups_last);
    if (saturated) {
      dram.repeat(w.a_name, false, c0, miss, R - 1);
      break;
    }
    dram.sweeps(w.a_name, false, c0, miss);
  }
}

// W: every tile is used once; Y: each core's panels, once or once per k-tile.
void BwmaTraffic::output_panels() {
  if (SetLoad::resolves_sets(s.llc)) output_panels_resolved();
  output_panels_uniform();
  bo->why = "each weight tile is loaded once";
  yo->why = fmt::format("output panel read-modify-written over {} k-tiles: {}", KT, fit_text(P * Yp + Ap + P * Wt, C));
}

// Reuse window of an output panel across k-tiles, per LLC set (setload.h): the round's
// output panels, one input panel, the round's weight tiles. Lines of a panel in sets it
// overflows are read-modify-written once per k-tile; with one set this is y_fits.
SetLoad BwmaTraffic::y_window(int64_t round) const {
  SetLoad win(s.llc);
  win.add(a_panel[0]);
  const int64_t act = (round == R - 1) ? a_last : P;
  for (int64_t c = 0; c < act; ++c) {
    const int64_t nb = round * P + c;
    win.add(block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S)));
    win.add(block_sweeps(b, 0, std::min(S, b.rows), nb * S, cw(b, nb * S)));
  }
  return win;
}

// Set-resolved: which lines of each output panel of round r miss at k-step kb >= 1. The
// window of the line holding rows m0..m1 of panel c runs from its use at k-step kb-1 to
// that at kb: every output panel of the round, the round's weight tiles kb, the input
// panel kb-1 from the line's rows on (its own line group only for the cores after c)
// and the input panel kb up to the line's rows. The input rows are added and removed
// line group by line group. The sets shift with the input panel, so each k-step has
// its own (the lines that miss move through the panel with kb).
std::vector<std::vector<std::vector<Sweep>>> BwmaTraffic::y_misses(int64_t r, int64_t act) {
  std::vector<std::vector<std::vector<Sweep>>> miss(act, std::vector<std::vector<Sweep>>(KT));
  std::optional<SetLoad> base;  // built for the first window that may overflow
  for (int64_t c = 0; c < act; ++c) tally_block(y, 0, w.m, (r * P + c) * S);
  const int32_t max_y = take_most();
  // The fullest set of the round's weight tiles kb. Every column's rows are row_stride
  // apart (MatrixView::addr), so under a modulo index tiles kb and kb' of S rows each whose
  // first rows are a whole number of lines apart are the same lines moved by whole lines:
  // rotated per-set counts, the same fullest set. Counted once per byte of a line the
  // tiles start at (speed only).
  std::fill(w_most_at.begin(), w_most_at.end(), -1);
  auto w_most = [&](int64_t kb) {
    const int64_t rows = std::min(S, b.rows - kb * S);
    int32_t* known = !s.llc.hashed_index && rows == S ? &w_most_at[(kb * S * b.row_stride) % L] : nullptr;
    if (known && *known >= 0) return *known;
    for (int64_t c = 0; c < act; ++c) tally_block(b, kb * S, rows, (r * P + c) * S);
    const int32_t most = take_most();
    if (known) *known = most;
    return most;
  };
  for (int64_t kb = 1; kb < KT; ++kb) {
    // The window's parts: the round's output panels, input panel kb-1, the lines of
    // input panel kb added group by group, the round's weight tiles kb (input lines
    // removed and the `extra` of the cores after c only lower it: they are lines of
    // panel kb-1's current row group, all of which were removed just before).
    if (max_y + max_a[kb - 1] + max_rows[kb] + w_most(kb) <= s.llc.ways) continue;
    if (!base) {
      base.emplace(s.llc);
      for (int64_t c = 0; c < act; ++c) base->add(block_sweeps(y, 0, w.m, (r * P + c) * S, cw(y, (r * P + c) * S)));
    }
    // The window, in a scratch whose storage is kept across k-steps (an engaged optional is
    // assigned in place; speed only: a fresh O(sets) block per k-step made glibc consolidate
    // its heap at every free).
    win_scratch = *base;
    SetLoad& win = *win_scratch;
    win.add(a_panel[kb - 1]);
    for (int64_t c = 0; c < act; ++c)
      win.add(block_sweeps(b, kb * S, std::min(S, b.rows - kb * S), (r * P + c) * S, cw(b, (r * P + c) * S)));
    // The same lines as rows_lines gives, from each column's row-0 address: a view's
    // address is linear in the row (MatrixView::addr: + r x row_stride), and a line's
    // number is a shift for power-of-two lines (speed only: no division per row).
    const PanelRows ap(a, (kb - 1) * S, cw(a, (kb - 1) * S), L), ac(a, kb * S, cw(a, kb * S), L);
    y_rows.clear();
    for (int64_t c = 0; c < act; ++c) y_rows.emplace_back(y, (r * P + c) * S, cw(y, (r * P + c) * S), L);
    for (int64_t m0 = 0; m0 < w.m;) {
      const int64_t first = ac.first_line(m0);
      int64_t m1 = m0;
      while (m1 + 1 < w.m && ac.first_line(m1 + 1) == first) ++m1;
      const int64_t ap0 = ap.first_line(m0), ap1 = ap.last_line(m1);
      for (int64_t l = ap0; l <= ap1; ++l) win.add_line(l, -1);
      for (int64_t l = first, l1 = ac.last_line(m1); l <= l1; ++l) win.add_line(l, 1);
      // The group's lines of input panel kb-1: at most that many `extra` lines (speed only: a
      // line whose set does not overflow with all of them, or overflows without them, is
      // decided without counting them).
      const int64_t a_group = ap1 - ap0 + 1;
      for (int64_t c = 0; c < act; ++c)
        for (int64_t l = y_rows[c].first_line(m0), l1 = y_rows[c].last_line(m1); l <= l1; ++l) {
          double extra = 0;
          if (c + 1 < act && !win.overflowing(l, static_cast<double>(a_group))) continue;
          if (c + 1 < act && !win.overflowing(l))
            for (int64_t la = ap0; la <= ap1; ++la) extra += (set_of(la) == set_of(l));
          if (!win.overflowing(l, extra)) continue;
          auto& v = miss[c][kb];
          const uint64_t at = static_cast<uint64_t>(l) * L;
          if (!v.empty() && v.back().end() == at) v.back().width += L, v.back().stride = v.back().width;
          else v.push_back({at, 1, L, L});
        }
      m0 = m1 + 1;
    }
  }
  return miss;
}

void BwmaTraffic::output_panels_resolved() {
  for (int64_t r = 0; r < R; ++r) {
    const int64_t act = (r == R - 1) ? a_last : P;
    const auto miss = y_misses(r, act);
    for (int64_t c = 0; c < act; ++c) {
      const int64_t nb = r * P + c;
      dram.sweeps(w.b_name, false, c0 + c, block_sweeps(b, 0, b.rows, nb * S, cw(b, nb * S)));
      // Reads: the whole panel at k-step 0, then the lines that miss at each later one;
      // write-backs: each evicted version, then the last one.
      const auto yv = block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S));
      dram.sweeps(w.y_name, false, c0 + c, yv);
      bool again = false;
      for (int64_t kb = 1; kb < KT; ++kb) {
        if (miss[c][kb].empty()) continue;  // no traffic (and no write-queue step)
        dram.sweeps(w.y_name, false, c0 + c, miss[c][kb]);
        dram.sweeps(w.y_name, true, c0 + c, miss[c][kb]);
        again = again || !miss[c][kb].empty();
      }
      dram.sweeps(w.y_name, true, c0 + c, yv);
      yo->refetch = std::max<int64_t>(yo->refetch, again ? KT : 1);
    }
  }
}

// Uniform caches: the cores before the round's last one also find the previous input
// panel's line of their row group in the window (the later cores read it after them).
// (Set-resolved caches: no panel here; output_panels_resolved did them.)
void BwmaTraffic::output_panels_uniform() {
  SetLoad y_win_last = y_window(0), y_win_early = y_win_last;
  for (int64_t nb = 0; nb < (SetLoad::resolves_sets(s.llc) ? 0 : NT); ++nb) {
    const int64_t core = nb % P, act = (nb / P == R - 1) ? a_last : P;
    if (nb % P == 0) {
      y_win_last = y_win_early = y_window(nb / P);
      y_win_early.add(Sweep{0, 1, L, std::max<int64_t>(1, S * y.elem / L) * L});
    }
    const SetLoad& y_win = core == act - 1 ? y_win_last : y_win_early;
    dram.sweeps(w.b_name, false, c0 + core, block_sweeps(b, 0, b.rows, nb * S, cw(b, nb * S)));
    const auto yv = block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S));
    SetLoad mine(s.llc);
    mine.add(yv);
    const double fY = mine.total() > 0 ? mine.lines_over(y_win) / mine.total() : 0.0;
    dram.repeat(w.y_name, false, c0 + core, yv, 1);
    dram.repeat(w.y_name, true, c0 + core, yv, 1);
    dram.missing(w.y_name, false, c0 + core, yv, KT - 1, y_win);
    dram.missing(w.y_name, true, c0 + core, yv, KT - 1, y_win);
    yo->refetch = std::max<int64_t>(yo->refetch, fY > 0 ? KT : 1);
  }
}

// L1 (private, per core): the same reuse questions with one core's footprints.
void BwmaTraffic::l1_misses() {
  for (int64_t c = 0; c < P; ++c) {
    const int64_t panels = even_share(NT, P, c);
    const int64_t y1 = (Yp + Ap + Wt <= C1) ? Yp : Yp * KT;
    const int64_t a1 = (A + Wp + 2 * Yp <= C1) ? (c == 0 ? A : 0) : A * panels;
    t.l1_misses[c0 + c] += panels * (Wp + y1) + a1;
  }
}

}  // namespace

// Weight-stationary GEMM over block-wise (panel) data.
void gemm_bwma(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
               const SystemDesc& s, int64_t P, DramStreams& dram, Traffic& t, int64_t c0) {
  BwmaTraffic(w, a, b, y, s, P, dram, t, c0).run();
}

}  // namespace bertlab::hw::analytic_detail

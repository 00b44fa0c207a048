#include "hwmodel/analytic.h"

#include "hwmodel/setload.h"
#include "hwmodel/writequeue.h"

#include <algorithm>
#include <fmt/format.h>
#include <cmath>
#include <deque>
#include <map>
#include <tuple>

namespace bertlab::hw {

namespace {

// Row-buffer bookkeeping of the DRAM request streams (operand x direction x core): each
// stream keeps the last row it touched (its own bank, see tracesim.h).
class DramStreams {
 public:
  DramStreams(const SystemDesc& s, Traffic& t) : L_(s.llc.line_bytes), R_(s.dram.row_bytes), t_(t) {}

  // One sweep of fetches (or write-backs): its lines, and the rows it opens. Reads open
  // rows in sweep order; write-backs wait in the stream's write queue (writequeue.h), which
  // issues them row by row.
  void sweep(const std::string& op, bool write, int64_t core, const Sweep& sw) {
    if (sw.count <= 0 || sw.width <= 0) return;
    if (write) return sweeps(op, write, core, {sw});
    const int64_t lines = distinct_blocks(sw, L_);
    Stream& st = stream(op, core);
    st.traffic->read_lines += lines;
    if (core < static_cast<int64_t>(t_.llc_misses.size())) t_.llc_misses[core] += lines;
    open_rows(st, sw);
  }
  // `times` passes over `v` of which only `fraction` of the lines miss (the lines in the
  // sets a reuse window overflows, see setload.h): the counts of full passes, scaled.
  void partial(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v,
               int64_t times, double fraction) {
    if (times <= 0 || fraction <= 0) return;
    Stream& st = stream(op, core);
    auto& o = *st.traffic;
    const bool has_core = core < (int64_t)t_.llc_misses.size();
    const int64_t r0 = o.read_lines, w0 = o.write_lines, m0 = o.row_misses,
                  l0 = has_core ? t_.llc_misses[core] : 0;
    repeat(op, write, core, v, times);
    auto scale = [&](int64_t& x, int64_t before) {
      x = before + std::llround(static_cast<double>(x - before) * std::min(1.0, fraction));
    };
    scale(o.read_lines, r0);
    scale(o.write_lines, w0);
    scale(o.row_misses, m0);
    if (has_core) scale(t_.llc_misses[core], l0);
  }
  // `times` further uses of the lines of `v`: only those in sets `window` overflows miss
  // (LRU stack distance per set, setload.h); their rows are opened in sweep order.
  void missing(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v,
               int64_t times, const SetLoad& window) {
    if (times <= 0) return;
    const auto lines = window.overflowing_lines(v);
    if (lines.empty()) return;
    repeat(op, write, core, lines, times);
  }
  // `body(i)` for i < n, where instance i does what instance i-1 did at addresses shifted
  // by a constant (the column tiles of a block): the first few instances are counted, each
  // later one is charged the counts of the last one counted, so the cost does not grow
  // with n.
  template <class F>
  void translated(int64_t n, F&& body) {
    constexpr int64_t kFollow = 4;
    for (int64_t i = 0; i < std::min(n, kFollow - 1); ++i) body(i);
    if (n < kFollow) return;
    const auto before = counters();
    std::vector<int64_t> was;
    for (const int64_t* x : before) was.push_back(*x);
    body(kFollow - 1);
    const auto after = counters();
    if (after != before) {  // a new operand appeared: count every instance
      for (int64_t i = kFollow; i < n; ++i) body(i);
      return;
    }
    for (size_t j = 0; j < after.size(); ++j) *after[j] += (*after[j] - was[j]) * (n - kFollow);
  }
  // The end of the work: the write queues issue what they still hold.
  void flush_all() {
    for (auto& st : streams_) {
      st.queue.drain_all();
      sync(st);
    }
  }
  void sweeps(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v) {
    if (!write) {
      for (const auto& s : v) sweep(op, write, core, s);
      return;
    }
    Stream& st = stream(op, core);
    int64_t lines = 0;
    for (const auto& s : v) lines += distinct_blocks(s, L_);
    st.traffic->write_lines += lines;
    st.queue.push(v, lines, 256);
    sync(st);
  }
  // The same list of sweeps `times` times: done once to reach the steady state, once more
  // to measure it, then the steady-state counts are multiplied.
  void repeat(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v,
              int64_t times) {
    if (times <= 0) return;
    Stream& st = stream(op, core);
    sweeps(op, write, core, v);
    if (times == 1) return;
    auto& o = *st.traffic;
    const auto before = std::tuple{o.read_lines, o.write_lines, o.row_misses,
                                   core < (int64_t)t_.llc_misses.size() ? t_.llc_misses[core] : 0};
    sweeps(op, write, core, v);
    const int64_t k = times - 2;
    o.read_lines += (o.read_lines - std::get<0>(before)) * k;
    o.write_lines += (o.write_lines - std::get<1>(before)) * k;
    o.row_misses += (o.row_misses - std::get<2>(before)) * k;
    if (core < (int64_t)t_.llc_misses.size())
      t_.llc_misses[core] += (t_.llc_misses[core] - std::get<3>(before)) * k;
  }

 private:
  // Per operand and core: the last row its reads left open (0: none) and its write queue.
  // Found by a short linear scan (a node has a handful of operands), no string-keyed tree
  // in the hot path.
  struct Stream {
    Stream(int64_t L, int64_t R) : queue(L, R, kWriteQueueLines) {}
    std::string op;
    int64_t core = 0;
    OperandTraffic* traffic = nullptr;
    int64_t last_row = 0;
    WriteQueue queue;
    int64_t queue_misses = 0;  // the queue's row misses already in `traffic`
  };
  Stream& stream(const std::string& op, int64_t core) {
    for (auto& st : streams_)
      if (st.core == core && st.op == op) return st;
    Stream& st = streams_.emplace_back(L_, R_);
    st.op = op;
    st.core = core;
    st.traffic = &t_.operands[op];  // std::map: the pointer stays valid
    return st;
  }
  void open_rows(Stream& st, const Sweep& sw) {
    // Row misses of reads: the rows a monotone sweep enters, less the one still open from
    // the previous sweep of this stream.
    int64_t rows = distinct_blocks(sw, R_);
    if (st.last_row == first_block(sw, R_) + 1) rows -= 1;
    st.last_row = last_block(sw, R_) + 1;  // 0 = nothing open yet
    st.traffic->row_misses += rows;
  }
  // Every count the streams add to.
  std::vector<int64_t*> counters() {
    std::vector<int64_t*> v;
    for (auto& [name, o] : t_.operands) v.insert(v.end(), {&o.read_lines, &o.write_lines, &o.row_misses});
    for (auto& x : t_.llc_misses) v.push_back(&x);
    return v;
  }
  void sync(Stream& st) {
    st.traffic->row_misses += st.queue.row_misses() - st.queue_misses;
    st.queue_misses = st.queue.row_misses();
  }

  int64_t L_, R_;
  Traffic& t_;
  std::deque<Stream> streams_;  // stable addresses
};

Traffic empty_traffic(const SystemDesc& s, int64_t cores) {
  Traffic t;
  t.line_bytes = s.llc.line_bytes;
  t.burst_bytes = s.dram.burst_bytes;
  t.l1_misses.assign(cores, 0);
  t.llc_misses.assign(cores, 0);
  return t;
}

int64_t lines(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t L) {
  return lines_of(block_sweeps(v, r0, nr, c0, nc), L);
}

std::string fit_text(int64_t footprint, int64_t capacity) {
  return fmt::format("{} lines {} {} of the LLC", footprint, footprint <= capacity ? "fit in" : "exceed",
                     capacity);
}

// Weight-stationary GEMM over block-wise (panel) data.
void gemm_bwma(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
               const SystemDesc& s, int64_t P, DramStreams& dram, Traffic& t) {
  const int64_t S = w.S, KT = w.k / S, NT = w.n / S, L = s.llc.line_bytes, C = s.llc.lines();
  const int64_t C1 = s.l1.lines();
  auto cw = [&](const MatrixView& v, int64_t c) { return std::min(S, v.cols - c); };
  std::vector<std::vector<Sweep>> a_panel(KT);
  std::vector<int64_t> a_lines(KT);
  int64_t A = 0;
  for (int64_t kb = 0; kb < KT; ++kb) {
    a_panel[kb] = block_sweeps(a, 0, w.m, kb * S, cw(a, kb * S));
    a_lines[kb] = lines_of(a_panel[kb], L);
    A += a_lines[kb];
  }
  const int64_t Wt = lines(b, 0, std::min(S, b.rows), 0, cw(b, 0), L);   // one weight tile
  const int64_t Wp = lines(b, 0, b.rows, 0, cw(b, 0), L);                 // one weight panel
  const int64_t Yp = lines(y, 0, w.m, 0, cw(y, 0), L);                    // one output panel
  const int64_t Ap = a_lines[0];
  const int64_t R = (NT + P - 1) / P, a_last = NT - (R - 1) * P;

  // Input panel kb: re-used by the next round of output panels if everything touched in
  // between fits: all of A, one weight panel per core (tiles after kb in this round, up to
  // kb in the next), this round's output panels, and the next round's from kb = 1 on.
  // Weight lines of one panel's tiles after kb and up to kb (narrow tiles share lines).
  std::vector<int64_t> w_after(KT), w_upto(KT);
  for (int64_t kb = 0; kb < KT; ++kb) {
    const int64_t split = std::min(b.rows, (kb + 1) * S);
    w_after[kb] = lines(b, split, b.rows - split, 0, cw(b, 0), L);
    w_upto[kb] = lines(b, 0, split, 0, cw(b, 0), L);
  }
  auto a_footprint = [&](int64_t act, int64_t next, int64_t kb) {
    return A + act * w_after[kb] + next * w_upto[kb] + act * Yp + (kb > 0 ? next * Yp : 0);
  };

  auto& ao = t.operands[w.a_name];
  auto& bo = t.operands[w.b_name];
  auto& yo = t.operands[w.y_name];
  // A: round 0 brings every panel in (core 0 touches each line first).
  for (int64_t kb = 0; kb < KT; ++kb) dram.sweeps(w.a_name, false, 0, a_panel[kb]);
  // Rows of panel kb that miss: for kb = KT-1 only this round's output rows after m are
  // still to be touched, for kb = 0 only the next round's rows before m have been: there
  // the footprint depends linearly on the row, and the missing rows form one range.
  auto a_refetch = [&](int64_t act, int64_t next) {
    std::vector<Sweep> v;
    for (int64_t kb = 0; kb < KT; ++kb) {
      const double base = A + act * w_after[kb] + next * w_upto[kb];
      const double cur = (kb < KT - 1) ? act * Yp : 0, cur_tail = (kb == KT - 1) ? act * Yp : 0;
      const double nxt = (kb > 0) ? next * Yp : 0, nxt_head = (kb == 0) ? next * Yp : 0;
      // footprint(m) = base + cur + nxt + cur_tail * (M - m)/M + nxt_head * m/M
      int64_t lo = w.m, hi = 0;  // rows [lo, hi) miss
      const double c0 = base + cur + nxt + cur_tail, slope = (nxt_head - cur_tail) / w.m;
      if (slope == 0) {
        if (c0 > C) lo = 0, hi = w.m;
      } else {
        // rows with c0 + slope*m > C
        const double mstar = (C - c0) / slope;
        if (slope > 0) lo = std::clamp<int64_t>(static_cast<int64_t>(std::floor(mstar)) + 1, 0, w.m), hi = w.m;
        else lo = 0, hi = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(mstar)), 0, w.m);
      }
      if (lo >= hi) continue;
      auto sw = block_sweeps(a, lo, hi - lo, kb * S, cw(a, kb * S));
      v.insert(v.end(), sw.begin(), sw.end());
    }
    return v;
  };
  if (R >= 2 && SetLoad(s.llc).uniform()) {
    dram.repeat(w.a_name, false, 0, a_refetch(P, P), R - 2);
    dram.sweeps(w.a_name, false, 0, a_refetch(P, a_last));
  } else if (R >= 2) {
    // Set-resolved: the same windows per LLC set. From round r to r+1 at k-panel kb: all
    // of A, round r's weight tiles after kb and round r+1's up to kb, round r's output
    // panels (for kb = KT-1 only from the line's rows on) and round r+1's (for kb = 0 only
    // before them). The row-dependent part is added and removed line group by line group.
    SetLoad a_all(s.llc);
    for (const auto& v : a_panel) a_all.add(v);
    auto y_lines = [&](int64_t nb, int64_t m0, int64_t m1, auto&& f) {  // lines of rows [m0, m1]
      const uint64_t lo = y.addr(m0, nb * S), hi = y.addr(m1, nb * S) + cw(y, nb * S) * y.elem - 1;
      for (uint64_t l = lo / L; l <= hi / L; ++l) f(static_cast<int64_t>(l));
    };
    for (int64_t r = 0; r + 1 < R; ++r) {
      const int64_t act = P, next = (r + 2 == R) ? a_last : P;
      std::vector<Sweep> miss;
      auto keep_line = [&](int64_t l) {
        const uint64_t at = static_cast<uint64_t>(l) * L;
        if (!miss.empty() && miss.back().end() == at) {
          miss.back().width += L;
          miss.back().stride = miss.back().width;
        } else {
          miss.push_back({at, 1, L, L});
        }
      };
      for (int64_t kb = 0; kb < KT; ++kb) {
        SetLoad win = a_all;
        for (int64_t c = 0; c < act; ++c) {
          const int64_t nb = r * P + c;
          const int64_t after = std::min(b.rows, (kb + 1) * S);  // weight rows of the tiles after kb
          win.add(block_sweeps(b, after, b.rows - after, nb * S, cw(b, nb * S)));
          if (kb < KT - 1) win.add(block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S)));
        }
        for (int64_t c = 0; c < next; ++c) {
          const int64_t nb = (r + 1) * P + c;
          win.add(block_sweeps(b, 0, std::min(b.rows, (kb + 1) * S), nb * S, cw(b, nb * S)));
          if (kb > 0) win.add(block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S)));
        }
        if (kb > 0 && kb < KT - 1) {
          const auto over = win.overflowing_lines(a_panel[kb]);
          miss.insert(miss.end(), over.begin(), over.end());
          continue;
        }
        // kb = KT-1: round r's output rows from the line's last row on; kb = 0: round
        // r+1's output rows before the line's first row.
        if (kb == KT - 1)
          for (int64_t c = 0; c < act; ++c) y_lines(r * P + c, 0, w.m - 1, [&](int64_t l) { win.add_line(l, 1); });
        for (int64_t m0 = 0; m0 < w.m;) {
          const int64_t line = static_cast<int64_t>(a.addr(m0, kb * S) / L);
          int64_t m1 = m0;
          while (m1 + 1 < w.m && static_cast<int64_t>(a.addr(m1 + 1, kb * S) / L) == line) ++m1;
          if (win.overflowing(line)) keep_line(line);
          if (kb == KT - 1)
            for (int64_t c = 0; c < act; ++c) y_lines(r * P + c, m0, m1, [&](int64_t l) { win.add_line(l, -1); });
          if (kb == 0)
            for (int64_t c = 0; c < next; ++c) y_lines((r + 1) * P + c, m0, m1, [&](int64_t l) { win.add_line(l, 1); });
          m0 = m1 + 1;
        }
      }
      dram.sweeps(w.a_name, false, 0, miss);
    }
  }
  const int64_t worst = a_footprint(P, R >= 2 ? P : 0, KT - 1);
  ao.refetch = std::max<int64_t>(ao.refetch, worst > C ? R : 1);
  ao.why = fmt::format("input panels re-read by each of {} round(s) of {} output panel(s): {}", R,
                       P, fit_text(worst, C));

  // W: every tile is used once; Y: each core's panels, once or once per k-tile.
  // Reuse window of an output panel across k-tiles, per LLC set (setload.h): the round's
  // output panels, one input panel, the round's weight tiles. Lines of a panel in sets it
  // overflows are read-modify-written once per k-tile; with one set this is y_fits.
  auto y_window = [&](int64_t round) {
    SetLoad win(s.llc);
    win.add(a_panel[0]);
    const int64_t act = (round == R - 1) ? a_last : P;
    for (int64_t c = 0; c < act; ++c) {
      const int64_t nb = round * P + c;
      win.add(block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S)));
      win.add(block_sweeps(b, 0, std::min(S, b.rows), nb * S, cw(b, nb * S)));
    }
    return win;
  };
  // The lines of rows [m0, m1] of panel column `col` of a BWMA view (contiguous rows).
  auto rows_lines = [&](const MatrixView& v, int64_t col, int64_t m0, int64_t m1, auto&& f) {
    const uint64_t lo = v.addr(m0, col), hi = v.addr(m1, col) + cw(v, col) * v.elem - 1;
    for (uint64_t l = lo / L; l <= hi / L; ++l) f(static_cast<int64_t>(l));
  };
  // Set-resolved: which lines of each output panel of round r miss at k-step kb >= 1. The
  // window of the line holding rows m0..m1 of panel c runs from its use at k-step kb-1 to
  // that at kb: every output panel of the round, the round's weight tiles kb, the input
  // panel kb-1 from the line's rows on (its own line group only for the cores after c)
  // and the input panel kb up to the line's rows. The input rows are added and removed
  // line group by line group. The sets shift with the input panel, so each k-step has
  // its own (the lines that miss move through the panel with kb).
  auto y_misses = [&](int64_t r, int64_t act) {
    std::vector<std::vector<std::vector<Sweep>>> miss(act, std::vector<std::vector<Sweep>>(KT));
    SetLoad base(s.llc);
    for (int64_t c = 0; c < act; ++c) base.add(block_sweeps(y, 0, w.m, (r * P + c) * S, cw(y, (r * P + c) * S)));
    const int64_t sets = s.llc.sets();
    for (int64_t kb = 1; kb < KT; ++kb) {
      SetLoad win = base;
      win.add(a_panel[kb - 1]);
      for (int64_t c = 0; c < act; ++c)
        win.add(block_sweeps(b, kb * S, std::min(S, b.rows - kb * S), (r * P + c) * S, cw(b, (r * P + c) * S)));
      for (int64_t m0 = 0; m0 < w.m;) {
        const int64_t first = static_cast<int64_t>(a.addr(m0, kb * S) / L);
        int64_t m1 = m0;
        while (m1 + 1 < w.m && static_cast<int64_t>(a.addr(m1 + 1, kb * S) / L) == first) ++m1;
        rows_lines(a, (kb - 1) * S, m0, m1, [&](int64_t l) { win.add_line(l, -1); });
        rows_lines(a, kb * S, m0, m1, [&](int64_t l) { win.add_line(l, 1); });
        for (int64_t c = 0; c < act; ++c)
          rows_lines(y, (r * P + c) * S, m0, m1, [&](int64_t l) {
            double extra = 0;
            if (c + 1 < act) rows_lines(a, (kb - 1) * S, m0, m1, [&](int64_t la) { extra += (la % sets == l % sets); });
            if (!win.overflowing(l, extra)) return;
            auto& v = miss[c][kb];
            const uint64_t at = static_cast<uint64_t>(l) * L;
            if (!v.empty() && v.back().end() == at) v.back().width += L, v.back().stride = v.back().width;
            else v.push_back({at, 1, L, L});
          });
        m0 = m1 + 1;
      }
    }
    return miss;
  };
  if (!SetLoad(s.llc).uniform()) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t act = (r == R - 1) ? a_last : P;
      const auto miss = y_misses(r, act);
      for (int64_t c = 0; c < act; ++c) {
        const int64_t nb = r * P + c;
        dram.sweeps(w.b_name, false, c, block_sweeps(b, 0, b.rows, nb * S, cw(b, nb * S)));
        // Reads: the whole panel at k-step 0, then the lines that miss at each later one;
        // write-backs: each evicted version, then the last one.
        const auto yv = block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S));
        dram.sweeps(w.y_name, false, c, yv);
        bool again = false;
        for (int64_t kb = 1; kb < KT; ++kb) {
          dram.sweeps(w.y_name, false, c, miss[c][kb]);
          dram.sweeps(w.y_name, true, c, miss[c][kb]);
          again = again || !miss[c][kb].empty();
        }
        dram.sweeps(w.y_name, true, c, yv);
        yo.refetch = std::max<int64_t>(yo.refetch, again ? KT : 1);
      }
    }
  }
  // Uniform caches: the cores before the round's last one also find the previous input
  // panel's line of their row group in the window (the later cores read it after them).
  SetLoad y_win_last = y_window(0), y_win_early = y_win_last;
  for (int64_t nb = 0; nb < (SetLoad(s.llc).uniform() ? NT : 0); ++nb) {
    const int64_t core = nb % P, act = (nb / P == R - 1) ? a_last : P;
    if (nb % P == 0) {
      y_win_last = y_win_early = y_window(nb / P);
      y_win_early.add(Sweep{0, 1, L, std::max<int64_t>(1, S * y.elem / L) * L});
    }
    const SetLoad& y_win = core == act - 1 ? y_win_last : y_win_early;
    dram.sweeps(w.b_name, false, core, block_sweeps(b, 0, b.rows, nb * S, cw(b, nb * S)));
    const auto yv = block_sweeps(y, 0, w.m, nb * S, cw(y, nb * S));
    SetLoad mine(s.llc);
    mine.add(yv);
    const double fY = mine.total() > 0 ? mine.lines_over(y_win) / mine.total() : 0.0;
    dram.repeat(w.y_name, false, core, yv, 1);
    dram.repeat(w.y_name, true, core, yv, 1);
    dram.missing(w.y_name, false, core, yv, KT - 1, y_win);
    dram.missing(w.y_name, true, core, yv, KT - 1, y_win);
    yo.refetch = std::max<int64_t>(yo.refetch, fY > 0 ? KT : 1);
  }
  bo.why = "each weight tile is loaded once";
  yo.why = fmt::format("output panel read-modify-written over {} k-tiles: {}", KT,
                       fit_text(P * Yp + Ap + P * Wt, C));

  // L1 (private, per core): the same reuse questions with one core's footprints.
  for (int64_t c = 0; c < P; ++c) {
    const int64_t panels = NT / P + (c < NT % P ? 1 : 0);
    const int64_t y1 = (Yp + Ap + Wt <= C1) ? Yp : Yp * KT;
    const int64_t a1 = (A + Wp + 2 * Yp <= C1) ? (c == 0 ? A : 0) : A * panels;
    t.l1_misses[c] += panels * (Wp + y1) + a1;
  }
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
        for (int64_t kb = 0; kb < KT; ++kb) dram.missing(w.b_name, false, 0, tile_rows(g, kb, kb + 1), 1, across(g, kb));
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
      const int64_t sets = s.llc.sets();
      auto keep = [&](std::vector<Sweep>& v, int64_t l) {
        const uint64_t at = static_cast<uint64_t>(l) * L;
        if (!v.empty() && v.back().end() == at) v.back().width += L, v.back().stride = v.back().width;
        else v.push_back({at, 1, L, L});
      };
      auto row_lines = [&](const MatrixView& v, int64_t m, int64_t tile) {  // lines of row m of a tile
        std::vector<int64_t> out;
        const int64_t c0 = tile * S, n = std::min(S, v.cols - c0);
        const uint64_t lo = v.addr(m, c0), hi = lo + n * v.elem - 1;
        for (uint64_t l = lo / L; l <= hi / L; ++l) out.push_back(static_cast<int64_t>(l));
        return out;
      };
      for (int64_t nb = 0; nb < NT; ++nb)
        for (int64_t kb = 0; kb < KT; ++kb) {
          // k-step 0 re-uses a Y line only when the column tile starts inside a line of the
          // previous one (S*e < line); an A line only after its first k-tile.
          const bool y_again = kb > 0 || (nb * S * e) % L != 0;
          const bool a_again = (kb * S * e) % L != 0;
          if (!y_again && !a_again) continue;
          const int64_t nbp = kb > 0 ? nb : nb - 1, kbp = kb > 0 ? kb - 1 : KT - 1;
          SetLoad win(s.llc);
          win.add(block_sweeps(b, kb * S, std::min(S, b.rows - kb * S), nb * S, std::min(S, b.cols - nb * S)));
          for (int64_t c2 = 0; c2 < act; ++c2) {
            const int64_t q0 = (r * P + c2) * Mb, qn = rows_of(r * P + c2);
            win.add(block_sweeps(a, q0, qn, kbp * S, std::min(S, a.cols - kbp * S)));
            win.add(block_sweeps(y, q0, qn, nbp * S, std::min(S, y.cols - nbp * S)));
          }
          std::vector<std::vector<int64_t>> ap(act), yp(act), ac(act), yc(act);
          for (int64_t i = 0; i < Mb; ++i) {
            for (int64_t c2 = 0; c2 < act; ++c2) {
              ap[c2].clear(), yp[c2].clear(), ac[c2].clear(), yc[c2].clear();
              if (i >= rows_of(r * P + c2)) continue;
              const int64_t m = (r * P + c2) * Mb + i;
              ap[c2] = row_lines(a, m, kbp), yp[c2] = row_lines(y, m, nbp);
              ac[c2] = row_lines(a, m, kb), yc[c2] = row_lines(y, m, nb);
              for (int64_t l : ap[c2]) win.add_line(l, -1);
              for (int64_t l : yp[c2]) win.add_line(l, -1);
            }
            // Row i's lines in the window of core c's line l, counted in l's set once each:
            // cores after c touched theirs in the previous k-step after l, cores before c
            // in the next k-step before l; `own_prev`/`own_next` say which of c's own count.
            auto overflows = [&](int64_t c, int64_t l, bool a_line) {
              std::vector<int64_t> u{l};
              for (int64_t c2 = 0; c2 < act; ++c2) {
                if (c2 > c || (a_line && c2 == c)) u.insert(u.end(), yp[c2].begin(), yp[c2].end());
                if (c2 > c) u.insert(u.end(), ap[c2].begin(), ap[c2].end());
                if (c2 < c || (!a_line && c2 == c)) u.insert(u.end(), ac[c2].begin(), ac[c2].end());
                if (c2 < c) u.insert(u.end(), yc[c2].begin(), yc[c2].end());
              }
              std::sort(u.begin(), u.end());
              u.erase(std::unique(u.begin(), u.end()), u.end());
              double extra = 0;
              for (int64_t x : u) extra += (x % sets == l % sets);
              return win.overflowing(l, extra);
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
          for (int64_t j = 0; j * per_line < a.cols; ++j) {
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

}  // namespace

Traffic analytic_traffic(const GemmWork& w, const SystemDesc& s, int64_t cores) {
  Traffic t = empty_traffic(s, cores);
  DramStreams dram(s, t);
  for (const auto& inst : w.instances) {
    t.accesses += 0;
    if (w.arrangement == Arrangement::bwma)
      gemm_bwma(w, inst[0], inst[1], inst[2], s, cores, dram, t);
    else
      gemm_rwma(w, inst[0], inst[1], inst[2], s, cores, dram, t);
  }
  dram.flush_all();
  return t;
}

Traffic analytic_traffic(const StreamWork& w, const SystemDesc& s, int64_t cores) {
  Traffic t = empty_traffic(s, cores);
  DramStreams dram(s, t);
  const int64_t L = s.llc.line_bytes, P = cores;
  for (const auto& acc : w.accesses) {
    const Sweep& sw = acc.sweep;
    if (sw.count <= 0 || sw.width <= 0) continue;
    auto& o = t.operands[acc.operand];
    o.why = "streamed once";
    std::vector<std::pair<int64_t, Sweep>> parts;  // core, part
    if (sw.count == 1 || sw.stride <= sw.width) {
      const uint64_t first = sw.start / L, last = (sw.end() - 1) / L;
      const int64_t n = static_cast<int64_t>(last - first + 1), chunk = (n + P - 1) / P;
      for (int64_t c = 0; c < P; ++c) {
        const int64_t l0 = c * chunk, l1 = std::min(n, l0 + chunk);
        if (l0 >= l1) continue;
        const uint64_t lo = std::max<uint64_t>(sw.start, (first + l0) * L);
        const uint64_t hi = std::min<uint64_t>(sw.end(), (first + l1) * L);
        parts.push_back({c, Sweep{lo, 1, static_cast<int64_t>(hi - lo), static_cast<int64_t>(hi - lo)}});
      }
    } else {
      const int64_t chunk = (sw.count + P - 1) / P;
      for (int64_t c = 0; c < P; ++c) {
        const int64_t i0 = c * chunk, i1 = std::min(sw.count, i0 + chunk);
        if (i0 < i1) parts.push_back({c, Sweep{sw.start + i0 * sw.stride, i1 - i0, sw.stride, sw.width}});
      }
    }
    for (const auto& [c, part] : parts) {
      dram.sweep(acc.operand, false, c, part);  // reads, or write-allocate fills
      if (acc.write) dram.sweep(acc.operand, true, c, part);
      t.l1_misses[c] += distinct_blocks(part, L);
    }
  }
  dram.flush_all();
  return t;
}

Traffic analytic_traffic(const RowWork& w, const SystemDesc& s, int64_t cores) {
  Traffic t = empty_traffic(s, cores);
  DramStreams dram(s, t);
  const int64_t L = s.llc.line_bytes, P = cores, C = s.llc.lines();
  for (const auto& mat : w.matrices) {
    const MatrixView& o = mat.output;
    const int64_t group = o.panel_width ? std::max<int64_t>(1, L / o.row_stride) : 1;
    const int64_t chunk = ((w.rows + P - 1) / P + group - 1) / group * group;
    // Lines one row touches over all operands: the reuse footprint of a line shared by the
    // `group` rows of a panel (BWMA), and of a row re-read by the passes.
    auto row_lines = [&](const MatrixView& v) { return lines(v, 0, 1, 0, v.cols, L); };
    int64_t F = row_lines(o);
    for (const auto& v : mat.inputs) F += row_lines(v);
    F *= std::min(P, (w.rows + chunk - 1) / chunk);
    // Per LLC set (setload.h): the window between two uses of a line (the next row of its
    // line group, or the next pass) is one row of every operand on every core; the lines in
    // sets it overflows are fetched at each of the group * passes uses.
    // Cores past the last chunk have no rows (whole line groups stay on one core).
    const int64_t busy = std::min(P, (w.rows + chunk - 1) / chunk);
    SetLoad row_win(s.llc);
    for (int64_t c = 0; c < busy; ++c) {
      const int64_t r = c * chunk;
      for (const auto& v : mat.inputs) row_win.add(block_sweeps(v, r, 1, 0, v.cols));
      row_win.add(block_sweeps(o, r, 1, 0, o.cols));
    }
    // Between two passes over a row only that row of the inputs is touched: a core runs
    // the passes of its row back to back.
    SetLoad pass_win(s.llc);
    for (const auto& v : mat.inputs) pass_win.add(block_sweeps(v, 0, 1, 0, v.cols));
    const int64_t refetch = F <= C ? 1 : group * w.passes;
    auto operand_sweeps = [&](const MatrixView& v, int64_t r0, int64_t nr) {
      if (v.panel_width == 0) return block_sweeps(v, r0, nr, 0, v.cols);
      // BWMA: the first row of each line group gathers one segment from every panel.
      std::vector<Sweep> out;
      const int64_t panels = (v.cols + v.panel_width - 1) / v.panel_width;
      for (int64_t r = r0; r < r0 + nr; r += group)
        out.push_back({v.addr(r, 0), panels, v.panel_stride, std::min(v.panel_width, v.cols) * v.elem});
      return out;
    };
    for (int64_t c = 0; c < P; ++c) {
      const int64_t r0 = c * chunk, nr = std::min(w.rows, r0 + chunk) - r0;
      if (nr <= 0) continue;
      for (size_t k = 0; k < mat.inputs.size(); ++k) t.l1_misses[c] += lines_of(operand_sweeps(mat.inputs[k], r0, nr), L);
      t.l1_misses[c] += lines_of(operand_sweeps(o, r0, nr), L);
    }
    // Set-resolved caches: the window of each line group is its own rows (their sets
    // shift with the group), and its refetches follow its first fetch.
    for (int64_t i = 0; i < (row_win.uniform() ? 0 : chunk); i += group) {
      SetLoad win(s.llc);
      for (int64_t c = 0; c < P; ++c) {
        const int64_t r = c * chunk + i;
        if (r >= w.rows) continue;
        for (const auto& v : mat.inputs) win.add(block_sweeps(v, r, 1, 0, v.cols));
        win.add(block_sweeps(o, r, 1, 0, o.cols));
      }
      for (int64_t c = 0; c < P; ++c) {
        const int64_t r = c * chunk + i, nr = std::min({group, w.rows - r, chunk - i});
        if (nr <= 0) continue;
        SetLoad pwin(s.llc);  // this core's row of the inputs (its passes run back to back)
        for (const auto& v : mat.inputs) pwin.add(block_sweeps(v, r, 1, 0, v.cols));
        for (size_t k = 0; k < mat.inputs.size(); ++k) {
          auto v = operand_sweeps(mat.inputs[k], r, nr);
          dram.sweeps(w.input_names[k], false, c, v);
          dram.missing(w.input_names[k], false, c, v, group - 1, win);
          dram.missing(w.input_names[k], false, c, v, group * (w.passes - 1), pwin);
        }
        auto v = operand_sweeps(o, r, nr);
        dram.sweeps(w.output_name, false, c, v);
        dram.sweeps(w.output_name, true, c, v);
        dram.missing(w.output_name, false, c, v, group - 1, win);
        dram.missing(w.output_name, true, c, v, group - 1, win);
      }
    }
    // Uniform caches: one window per core's rows, except that once the last busy core has
    // run out of rows (it may hold fewer) the others' windows lose its lines.
    const int64_t last_rows = w.rows - (busy - 1) * chunk;
    SetLoad row_win_tail(s.llc);
    for (int64_t c = 0; c + 1 < busy && row_win.uniform() && last_rows < chunk; ++c) {
      for (const auto& v : mat.inputs) row_win_tail.add(block_sweeps(v, c * chunk, 1, 0, v.cols));
      row_win_tail.add(block_sweeps(o, c * chunk, 1, 0, o.cols));
    }
    for (int64_t c = 0; c < (row_win.uniform() ? busy : 0); ++c) {
      const int64_t r0 = c * chunk, nr = std::min(w.rows, r0 + chunk) - r0;
      if (nr <= 0) continue;
      const bool tail = c + 1 < busy && last_rows < nr;
      auto rows_with = [&](int64_t a0, int64_t n, const SetLoad& rw) {
        for (size_t k = 0; k < mat.inputs.size(); ++k) {
          auto v = operand_sweeps(mat.inputs[k], a0, n);
          dram.repeat(w.input_names[k], false, c, v, 1);
          dram.missing(w.input_names[k], false, c, v, group - 1, rw);
          dram.missing(w.input_names[k], false, c, v, group * (w.passes - 1), pass_win);
        }
        auto v = operand_sweeps(o, a0, n);
        dram.repeat(w.output_name, false, c, v, 1);
        dram.repeat(w.output_name, true, c, v, 1);
        dram.missing(w.output_name, false, c, v, group - 1, rw);
        dram.missing(w.output_name, true, c, v, group - 1, rw);
      };
      if (!tail) {
        rows_with(r0, nr, row_win);
      } else {
        rows_with(r0, last_rows, row_win);
        rows_with(r0 + last_rows, nr - last_rows, row_win_tail);
      }
    }
    for (const auto& n : w.input_names) {
      t.operands[n].refetch = refetch;
      t.operands[n].why = o.panel_width ? "rows gathered across panels, one line per panel per group of rows"
                                        : "rows read contiguously";
    }
    t.operands[w.output_name].refetch = refetch;
    t.operands[w.output_name].why = o.panel_width ? "rows scattered across panels" : "rows written contiguously";
  }
  dram.flush_all();
  return t;
}

}  // namespace bertlab::hw

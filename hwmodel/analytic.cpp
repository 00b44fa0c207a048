#include "hwmodel/analytic.h"

#include "hwmodel/analytic_detail.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/layout.h"
#include "hwmodel/tracesim.h"

namespace bertlab::hw {

using namespace analytic_detail;

Traffic analytic_traffic(const GemmWork& w, const SystemDesc& s, int64_t cores) {
  Traffic t = empty_traffic(s, cores);
  DramStreams dram(s, t);
  arrangement_desc(w.arrangement).analytic_gemm(w, s, cores, dram, t);
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
      const int64_t n = static_cast<int64_t>(last - first + 1), chunk = ceil_div(n, P);
      for (int64_t c = 0; c < P; ++c) {
        const int64_t l0 = c * chunk, l1 = std::min(n, l0 + chunk);
        if (l0 >= l1) continue;
        const uint64_t lo = std::max<uint64_t>(sw.start, (first + l0) * L);
        const uint64_t hi = std::min<uint64_t>(sw.end(), (first + l1) * L);
        parts.push_back({c, Sweep{lo, 1, static_cast<int64_t>(hi - lo), static_cast<int64_t>(hi - lo)}});
      }
    } else {
      const int64_t chunk = ceil_div(sw.count, P);
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

// Views of a layout with no panel form (MatrixView::address): the closed forms below read
// panels, so their row ops are simulated exactly (every address, tracesim.h).
static bool has_panel_form(const RowWork& w) {
  for (const auto& mat : w.matrices) {
    if (mat.output.address) return false;
    for (const auto& v : mat.inputs)
      if (v.address) return false;
  }
  return true;
}

Traffic analytic_traffic(const RowWork& w, const SystemDesc& s, int64_t cores) {
  if (!has_panel_form(w)) {
    TraceSim sim(s, cores);
    sim.run(w);
    Traffic t = sim.finish();
    for (auto& [name, o] : t.operands) o.why = "simulated exactly (a layout with no closed form here)";
    return t;
  }
  Traffic t = empty_traffic(s, cores);
  DramStreams dram(s, t);
  const int64_t L = s.llc.line_bytes, P = cores, C = s.llc.lines();
  for (const auto& mat : w.matrices) {
    const MatrixView& o = mat.output;
    const int64_t group = rows_sharing_a_line(o, L);
    const int64_t chunk = row_chunk(w.rows, P, group);  // core_rows's split (work.h)
    // Lines one row touches over all operands: the reuse footprint of a line shared by the
    // `group` rows of a panel (BWMA), and of a row re-read by the passes.
    auto row_lines = [&](const MatrixView& v) { return lines(v, 0, 1, 0, v.cols, L); };
    int64_t F = row_lines(o);
    for (const auto& v : mat.inputs) F += row_lines(v);
    F *= std::min(P, ceil_div(w.rows, chunk));
    // Per LLC set (setload.h): the window between two uses of a line (the next row of its
    // line group, or the next pass) is one row of every operand on every core; the lines in
    // sets it overflows are fetched at each of the group * passes uses.
    // Cores past the last chunk have no rows (whole line groups stay on one core).
    const int64_t busy = std::min(P, ceil_div(w.rows, chunk));
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
      const int64_t panels = ceil_div(v.cols, v.panel_width);
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
    // The windows are emptied after each use by taking their sweeps back (whole numbers per
    // set: exactly empty), not rebuilt: O(lines) instead of O(sets) per row (speed only).
    SetLoad win(s.llc), pwin(s.llc);
    std::vector<Sweep> win_parts, pwin_parts;
    auto append = [](std::vector<Sweep>& into, const std::vector<Sweep>& v) {
      into.insert(into.end(), v.begin(), v.end());
    };
    for (int64_t i = 0; i < (row_win.uniform() ? 0 : chunk); i += group) {
      win_parts.clear();
      for (int64_t c = 0; c < P; ++c) {
        const int64_t r = c * chunk + i;
        if (r >= w.rows) continue;
        for (const auto& v : mat.inputs) append(win_parts, block_sweeps(v, r, 1, 0, v.cols));
        append(win_parts, block_sweeps(o, r, 1, 0, o.cols));
      }
      win.add(win_parts);
      for (int64_t c = 0; c < P; ++c) {
        const int64_t r = c * chunk + i, nr = std::min({group, w.rows - r, chunk - i});
        if (nr <= 0) continue;
        pwin_parts.clear();  // this core's row of the inputs (its passes run back to back)
        for (const auto& v : mat.inputs) append(pwin_parts, block_sweeps(v, r, 1, 0, v.cols));
        pwin.add(pwin_parts);
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
        pwin.add(pwin_parts, -1.0);
      }
      win.add(win_parts, -1.0);
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

namespace analytic_detail {

void SetTally::add_long_run(int64_t first, int64_t n) {
  const int64_t sets = set_of_.sets;
  if (set_of_.hashed || n % sets < kRangeLines) {
    if (!set_of_.hashed) turns_ += n / sets, n %= sets;  // whole turns load every set once
    for (int64_t l = first; l < first + n; ++l) add_line(l);
    return;
  }
  turns_ += n / sets;
  const int64_t f = set_of_(first), end = f + n % sets;  // sets [f, end), cyclically
  ends_.emplace_back(f, 1);
  if (end <= sets) {
    ends_.emplace_back(end, -1);
  } else {
    ends_.emplace_back(sets, -1);
    ends_.emplace_back(0, 1);
    ends_.emplace_back(end - sets, -1);
  }
}

void SetTally::add_sweep(const Sweep& sw, int64_t L) {
  if (sw.count <= 0 || sw.width <= 0) return;
  if (sw.count == 1 || sw.stride <= sw.width) return add_bytes(sw.start, sw.end() - 1, L);
  for (int64_t i = 0; i < sw.count; ++i) {
    const uint64_t at = sw.start + i * sw.stride;
    add_bytes(at, at + sw.width - 1, L);
  }
}

int32_t SetTally::take_most() {
  int64_t best = most_;
  if (!ends_.empty()) {
    // The ranges' depth from each end on (ends at a set before starts there: [first, end)).
    std::sort(ends_.begin(), ends_.end());
    depth_.clear();
    int64_t d = 0;
    for (const auto& [at, step] : ends_) {
      d += step;
      if (!depth_.empty() && depth_.back().first == at) depth_.back().second = static_cast<int32_t>(d);
      else depth_.emplace_back(at, static_cast<int32_t>(d));
      best = std::max(best, d);
    }
    // A set with lines tallied one by one holds them and the ranges' depth there.
    for (int64_t st : touched_) {
      const auto it = std::upper_bound(depth_.begin(), depth_.end(), std::pair<int64_t, int32_t>(st, INT32_MAX));
      best = std::max<int64_t>(best, count_[st] + (it == depth_.begin() ? 0 : std::prev(it)->second));
    }
    ends_.clear();
  }
  const auto m = static_cast<int32_t>(turns_ + best);
  clear_tally(count_, touched_);
  most_ = 0, turns_ = 0;
  return m;
}

// The most lines any set holds among the lines of `v` (analytic_detail.h).
int32_t most_lines_in_a_set(const std::vector<Sweep>& v, int64_t L, SetTally& tally, int32_t limit) {
  int64_t last = -1;
  const BlockOf line_of(L);
  for (const auto& sw : v)
    for (int64_t i = 0; i < sw.count && tally.at_least() <= limit; ++i) {
      const uint64_t at = sw.start + i * sw.stride;
      int64_t lo = line_of(at);
      const int64_t hi = line_of(at + sw.width - 1);
      if (lo == last) ++lo;
      if (lo > hi) continue;
      last = hi;
      tally.add_run(lo, hi - lo + 1);
    }
  return tally.take_most();
}

}  // namespace analytic_detail

}  // namespace bertlab::hw

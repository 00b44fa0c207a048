#pragma once
// Shared by the analytic traffic model's files (analytic.cpp, analytic_bwma.cpp,
// analytic_rwma*.cpp): the DRAM request-stream bookkeeping, small helpers, and the GEMM
// models of the two arrangements. Not part of the public interface (analytic.h).
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hwmodel/setload.h"
#include "hwmodel/system.h"
#include "hwmodel/work.h"
#include "hwmodel/writequeue.h"

namespace bertlab::hw::analytic_detail {

// A list of line sweeps (each one run of consecutive lines, count 1) kept as segments, each
// a stored body repeated `times` times, and groups of consecutive segments repeated as a
// whole: the set-resolved RWMA k-step windows (analytic_rwma.cpp) append the same window's
// missing lines, and the same column tile's, many times over, and storing every copy cost
// memory and time. The list is the one that appending each copy sweep by sweep gives with
// the merge rule of those lists: a run that starts where the list's last sweep ends joins it.
class SweepRuns {
 public:
  struct Seg {
    size_t begin = 0, end = 0;  // the body: pool()[begin, end)
    int64_t times = 0;
  };
  struct Group {
    size_t seg_begin = 0, seg_end = 0;  // segs()[seg_begin, seg_end), repeated as a whole
    int64_t times = 0;
  };
  // Stores a body (consecutive sweeps that do not touch) and returns where it is.
  std::pair<size_t, size_t> put(const std::vector<Sweep>& body) {
    const size_t b = pool_.size();
    pool_.insert(pool_.end(), body.begin(), body.end());
    return {b, pool_.size()};
  }
  // Appends `times` copies of a stored body.
  void add(size_t begin, size_t end, int64_t times) {
    if (begin >= end) return;
    while (times > 0) {
      if (!segs_.empty() && pool_[segs_.back().end - 1].end() == pool_[begin].start) {
        // The body's first run continues the list's last sweep: one copy with that sweep
        // widened (on a copy of the last segment's body: bodies may be shared).
        if (segs_.size() == sealed_) unseal_last();
        if (segs_.size() - 1 < unit_) unit_broken_ = true;
        const Seg last = segs_.back();
        segs_.pop_back();
        if (last.times > 1) segs_.push_back({last.begin, last.end, last.times - 1});
        std::vector<Sweep> copy(pool_.begin() + static_cast<std::ptrdiff_t>(last.begin),
                                pool_.begin() + static_cast<std::ptrdiff_t>(last.end));
        copy.back().width += pool_[begin].width;
        copy.back().stride = copy.back().width;
        copy.insert(copy.end(), pool_.begin() + static_cast<std::ptrdiff_t>(begin) + 1,
                    pool_.begin() + static_cast<std::ptrdiff_t>(end));
        const auto [b, e] = put(copy);
        segs_.push_back({b, e, 1});
        --times;
        continue;
      }
      const bool self_joins = pool_[end - 1].end() == pool_[begin].start;  // copy i+1 joins copy i
      if (segs_.size() > std::max(sealed_, unit_) && segs_.back().begin == begin && segs_.back().end == end &&
          !self_joins) {
        segs_.back().times += times;
        return;
      }
      segs_.push_back({begin, end, self_joins ? 1 : times});
      times = self_joins ? times - 1 : 0;
    }
  }
  // Starts a unit: what is appended from here on may be appended again by `repeat_unit`.
  void begin_unit() {
    unit_ = segs_.size();
    unit_broken_ = false;
  }
  // Appends the unit (what was appended since `begin_unit`, which may itself have been
  // repeated) once more; false, with nothing appended, when that is not a repetition of
  // whole segments (nothing in it, it joined what was before it, or its copies would join).
  bool repeat_unit() {
    if (unit_broken_ || segs_.size() <= unit_) return false;
    if (!groups_.empty() && groups_.back().seg_begin == unit_ && groups_.back().seg_end == segs_.size()) {
      groups_.back().times += 1;
      return true;
    }
    if (unit_ < sealed_) return false;
    if (pool_[segs_.back().end - 1].end() == pool_[segs_[unit_].begin].start) return false;
    groups_.push_back({unit_, segs_.size(), 2});
    sealed_ = segs_.size();
    return true;
  }
  const std::vector<Sweep>& pool() const { return pool_; }
  const std::vector<Seg>& segs() const { return segs_; }
  const std::vector<Group>& groups() const { return groups_; }
  // Calls f(seg) for every segment in list order, a group's segments once per copy of the
  // group, until f returns false (for the head of the list).
  template <class F>
  void for_each_copy(F&& f) const {
    size_t i = 0, gi = 0;
    while (i < segs_.size()) {
      if (gi < groups_.size() && groups_[gi].seg_begin == i) {
        for (int64_t k = 0; k < groups_[gi].times; ++k)
          for (size_t x = groups_[gi].seg_begin; x < groups_[gi].seg_end; ++x)
            if (!f(segs_[x])) return;
        i = groups_[gi].seg_end;
        ++gi;
        continue;
      }
      if (!f(segs_[i])) return;
      ++i;
    }
  }

 private:
  // The list's last segment belongs to a group: one copy is taken out of the group and
  // appended as plain segments, so that the list's last sweep can change.
  void unseal_last() {
    Group& g = groups_.back();
    g.times -= 1;
    const size_t b = g.seg_begin, e = g.seg_end;
    if (g.times == 1) groups_.pop_back();
    for (size_t x = b; x < e; ++x) {
      const Seg copy = segs_[x];
      segs_.push_back(copy);
    }
    sealed_ = e;
  }
  std::vector<Sweep> pool_;
  std::vector<Seg> segs_;
  std::vector<Group> groups_;
  size_t sealed_ = 0;  // segs_ before this belong to groups (or precede one): never changed
  size_t unit_ = 0;    // where the unit begins
  bool unit_broken_ = false;
};

// Row-buffer bookkeeping of the DRAM request streams (operand x direction x core): each
// stream keeps the last row it touched (its own bank, see tracesim.h).
class DramStreams {
 public:
  DramStreams(const SystemDesc& s, Traffic& t)
      : L_(s.llc.line_bytes), R_(s.dram.row_bytes), Lsh_(shift_of(L_)), Rsh_(shift_of(R_)), t_(t) {}

  // One sweep of fetches (or write-backs): its lines, and the rows it opens. Reads open
  // rows in sweep order; write-backs wait in the stream's write queue (writequeue.h), which
  // issues them row by row.
  void sweep(const std::string& op, bool write, int64_t core, const Sweep& sw) {
    if (sw.count <= 0 || sw.width <= 0) return;
    if (write) return sweeps(op, write, core, {sw});
    read(stream(op, core), core, sw);
  }
  // `times` further uses of the lines of `v`: only those in sets `window` overflows miss
  // (LRU stack distance per set, setload.h); their rows are opened in sweep order.
  // A uniform window of a spread hashed index evicts a share q of the lines of `v`
  // (SetLoad::miss_share): their expected counts (`thinned`).
  void missing(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v,
               int64_t times, const SetLoad& window) {
    if (times <= 0) return;
    if (window.uniform()) {
      const double q = window.miss_share(v);
      if (q > 0) thinned(op, core, q, [&] { repeat(op, write, core, v, times); });
      return;
    }
    const auto lines = window.overflowing_lines(v);
    if (lines.empty()) return;
    repeat(op, write, core, lines, times);
  }
  // `body()`, which touches only the stream of `op` and `core`, for a share q of its lines
  // taken at random: the lines (and LLC misses) it adds, times q; the rows it opens, times
  // the chance 1 - (1 - q)^m that a row holds one of the q share of its m lines.
  template <class F>
  void thinned(const std::string& op, int64_t core, double q, F&& body) {
    if (q >= 1) return body();
    Stream& st = stream(op, core);
    OperandTraffic& o = *st.traffic;
    const int64_t r0 = o.read_lines, w0 = o.write_lines, m0 = o.row_misses;
    const bool own = core < static_cast<int64_t>(t_.llc_misses.size());
    const int64_t l0 = own ? t_.llc_misses[core] : 0;
    body();
    auto part = [q](int64_t was, int64_t now) { return was + std::llround(q * static_cast<double>(now - was)); };
    const int64_t lines = o.read_lines - r0 + o.write_lines - w0, rows = o.row_misses - m0;
    const double per_row = rows > 0 ? static_cast<double>(lines) / static_cast<double>(rows) : 1.0;
    o.read_lines = part(r0, o.read_lines);
    o.write_lines = part(w0, o.write_lines);
    o.row_misses = m0 + std::llround((1 - std::pow(1 - q, per_row)) * static_cast<double>(rows));
    if (own) t_.llc_misses[core] = part(l0, t_.llc_misses[core]);
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
      Stream* st = nullptr;  // found once for the list, at its first non-empty sweep (speed only)
      for (const auto& s : v) {
        if (s.count <= 0 || s.width <= 0) continue;
        if (!st) st = &stream(op, core);
        read(*st, core, s);
      }
      return;
    }
    Stream& st = stream(op, core);
    int64_t lines = 0;
    for (const auto& s : v) lines += blocks(s, L_);
    st.traffic->write_lines += lines;
    st.queue.push(v, lines, 256);
    sync(st);
  }
  // The sweeps of `runs` in order, as `sweeps` would take them expanded. Reads: each
  // repeated segment through `repeat`, exact for reads (every copy after the first starts
  // with the row the previous one left open). Write-backs: the queue follows at most
  // max(256, 4 x its depth) runs, each sweep at least one, so it gets the expanded list up
  // to that many sweeps and the total line count (WriteQueue::push).
  void sweeps(const std::string& op, bool write, int64_t core, const SweepRuns& runs) {
    const auto& pool = runs.pool();
    const auto& segs = runs.segs();
    const auto& groups = runs.groups();
    if (!write) {
      if (segs.empty()) return;
      Stream& st = stream(op, core);
      // A body read from any open row: its lines, its row misses when it does not start
      // in the open row (one less when it does: `read` charges only a sweep's first row
      // to the row left open), its first row and the row it leaves open (`read`'s +1
      // convention). Summed once per body, then each copy costs O(1) (speed only).
      struct Summary {
        int64_t lines = 0, rows = 0, first = 0, last = 0;
      };
      std::unordered_map<size_t, Summary> summaries;
      auto summary = [&](const SweepRuns::Seg& g) -> const Summary& {
        auto [it, fresh] = summaries.try_emplace(g.begin);
        if (!fresh) return it->second;
        Summary& sm = it->second;
        for (size_t x = g.begin; x < g.end; ++x) {
          const Sweep& sw = pool[x];
          if (sw.count <= 0 || sw.width <= 0) continue;
          sm.lines += blocks(sw, L_);
          int64_t rows = blocks(sw, R_);
          if (sm.last == 0) sm.first = first_block(sw, R_) + 1;
          else if (sm.last == first_block(sw, R_) + 1) rows -= 1;
          sm.rows += rows;
          sm.last = last_block(sw, R_) + 1;
        }
        return sm;
      };
      auto seg = [&](const SweepRuns::Seg& g) {
        const Summary& sm = summary(g);
        if (sm.last == 0) return;  // no lines
        repeat_on(st, core, g.times, [&] {
          st.traffic->read_lines += sm.lines;
          if (core < static_cast<int64_t>(t_.llc_misses.size())) t_.llc_misses[core] += sm.lines;
          st.traffic->row_misses += sm.rows - (st.last_row == sm.first ? 1 : 0);
          st.last_row = sm.last;
        });
      };
      size_t i = 0, gi = 0;
      while (i < segs.size()) {
        if (gi < groups.size() && groups[gi].seg_begin == i) {
          // A group: once, once more measured, the rest multiplied (exact as `repeat`).
          const auto& gr = groups[gi];
          repeat_on(st, core, gr.times, [&] {
            for (size_t x = gr.seg_begin; x < gr.seg_end; ++x) seg(segs[x]);
          });
          i = gr.seg_end;
          ++gi;
          continue;
        }
        seg(segs[i++]);
      }
      return;
    }
    const size_t follow = static_cast<size_t>(std::max<int64_t>(256, 4 * kWriteQueueLines)) + 1;
    std::vector<Sweep> head;
    runs.for_each_copy([&](const SweepRuns::Seg& g) {
      for (int64_t k = 0; k < g.times && head.size() < follow; ++k)
        for (size_t x = g.begin; x < g.end && head.size() < follow; ++x) head.push_back(pool[x]);
      return head.size() < follow;
    });
    auto seg_lines = [&](const SweepRuns::Seg& g) {
      int64_t per_copy = 0;
      for (size_t x = g.begin; x < g.end; ++x) per_copy += blocks(pool[x], L_);
      return per_copy * g.times;
    };
    int64_t lines = 0;
    for (size_t i = 0, gi = 0; i < segs.size();) {
      if (gi < groups.size() && groups[gi].seg_begin == i) {
        int64_t per_copy = 0;
        for (size_t x = groups[gi].seg_begin; x < groups[gi].seg_end; ++x) per_copy += seg_lines(segs[x]);
        lines += per_copy * groups[gi].times;
        i = groups[gi].seg_end;
        ++gi;
      } else {
        lines += seg_lines(segs[i++]);
      }
    }
    Stream& st = stream(op, core);  // as `sweeps` does, also when there is nothing to write
    st.traffic->write_lines += lines;
    st.queue.push(head, lines, 256);
    sync(st);
  }
  // The same list of sweeps `times` times: done once to reach the steady state, once more
  // to measure it, then the steady-state counts are multiplied.
  void repeat(const std::string& op, bool write, int64_t core, const std::vector<Sweep>& v,
              int64_t times) {
    repeat_pass(op, core, times, [&] { sweeps(op, write, core, v); });
  }
  // `pass()`, which touches only the stream of `op` and `core`, `times` times: done once to
  // reach the steady state, once more to measure it, then the steady-state counts are
  // multiplied.
  template <class F>
  void repeat_pass(const std::string& op, int64_t core, int64_t times, F&& pass) {
    if (times <= 0) return;
    repeat_on(stream(op, core), core, times, pass);
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
  // repeat_pass on a stream already found.
  template <class F>
  void repeat_on(Stream& st, int64_t core, int64_t times, F&& pass) {
    if (times <= 0) return;
    pass();
    if (times == 1) return;
    auto& o = *st.traffic;
    const auto before = std::tuple{o.read_lines, o.write_lines, o.row_misses,
                                   core < (int64_t)t_.llc_misses.size() ? t_.llc_misses[core] : 0};
    pass();
    const int64_t k = times - 2;
    o.read_lines += (o.read_lines - std::get<0>(before)) * k;
    o.write_lines += (o.write_lines - std::get<1>(before)) * k;
    o.row_misses += (o.row_misses - std::get<2>(before)) * k;
    if (core < (int64_t)t_.llc_misses.size())
      t_.llc_misses[core] += (t_.llc_misses[core] - std::get<3>(before)) * k;
  }

  Stream& stream(const std::string& op, int64_t core) {
    for (auto& st : streams_)
      if (st.core == core && st.op == op) return st;
    Stream& st = streams_.emplace_back(L_, R_);
    st.op = op;
    st.core = core;
    st.traffic = &t_.operands[op];  // std::map: the pointer stays valid
    return st;
  }
  // distinct_blocks (layout.h), its contiguous case inline: most swept lists here are runs
  // of whole lines (speed only; the same value).
  static int64_t blocks(const Sweep& sw, int64_t B) {
    if (sw.count <= 0 || sw.width <= 0) return 0;
    if (sw.count == 1 || sw.stride <= sw.width) return static_cast<int64_t>((sw.end() - 1) / B - sw.start / B + 1);
    return distinct_blocks(sw, B);
  }
  // -1, or log2(B) when B is a power of two: blocks of a contiguous sweep by shifts.
  static int shift_of(int64_t B) { return log2_or_minus_one(B); }
  // x / B, by a shift when `sh` says B is a power of two (the same value; speed only).
  static int64_t block_of(uint64_t x, int64_t B, int sh) { return static_cast<int64_t>(sh >= 0 ? x >> sh : x / B); }
  // One sweep of fetches on stream `st`: its lines, and the rows it opens.
  void read(Stream& st, int64_t core, const Sweep& sw) {
    if (sw.count <= 0 || sw.width <= 0) return;
    const bool run = sw.count == 1 || sw.stride <= sw.width;  // contiguous: blocks inline, by shifts
    const uint64_t last = sw.end() - 1;
    const int64_t lines = run ? block_of(last, L_, Lsh_) - block_of(sw.start, L_, Lsh_) + 1 : distinct_blocks(sw, L_);
    st.traffic->read_lines += lines;
    if (core < static_cast<int64_t>(t_.llc_misses.size())) t_.llc_misses[core] += lines;
    // Row misses of reads: the rows a monotone sweep enters, less the one still open from
    // the previous sweep of this stream.
    const int64_t first_row = block_of(sw.start, R_, Rsh_), last_row = block_of(last, R_, Rsh_);
    int64_t rows = run ? last_row - first_row + 1 : distinct_blocks(sw, R_);
    if (st.last_row == first_row + 1) rows -= 1;
    st.last_row = last_row + 1;  // 0 = nothing open yet
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
  int Lsh_, Rsh_;  // shift_of(L_), shift_of(R_)
  Traffic& t_;
  std::deque<Stream> streams_;  // stable addresses
};

inline Traffic empty_traffic(const SystemDesc& s, int64_t cores) {
  Traffic t;
  t.line_bytes = s.llc.line_bytes;
  t.burst_bytes = s.dram.burst_bytes;
  t.l1_misses.assign(cores, 0);
  t.llc_misses.assign(cores, 0);
  return t;
}

inline int64_t lines(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0, int64_t nc, int64_t L) {
  return lines_of(block_sweeps(v, r0, nr, c0, nc), L);
}

inline std::string fit_text(int64_t footprint, int64_t capacity) {
  return fmt::format("{} lines {} {} of the LLC", footprint, footprint <= capacity ? "fit in" : "exceed",
                     capacity);
}

// Weight-stationary GEMM over block-wise (panel) data (analytic_bwma.cpp), on the P cores
// c0 .. c0 + P - 1.
void gemm_bwma(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
               const SystemDesc& s, int64_t P, DramStreams& dram, Traffic& t, int64_t c0);
// Weight-stationary GEMM over row-major data with sequence blocks (analytic_rwma.cpp).
void gemm_rwma(const GemmWork& w, const MatrixView& a, const MatrixView& b, const MatrixView& y,
               const SystemDesc& s, int64_t P, DramStreams& dram, Traffic& t);

// A set-resolved reuse window that is moved from one window to the next instead of rebuilt
// (speed only; the per-set loads, hence the counts, are those of the window built from
// scratch): a fixed base plus parts, each a column range [c0, c1) of one matrix over the row
// blocks of one round of sequence blocks (or over all its rows), added block by block as
// block_sweeps, as the windows built from scratch add them. SetLoad's per-set counts are
// whole numbers and a window's load is their sum, so taking a part's sweeps back out
// (SetLoad::add with times -1) and adding the new part's gives exactly the window built from
// scratch, in any order. When the matrix's rows sit apart in lines (lines_apart), a part holds in every row the lines
// of one line range, row 0's shifted by whole row strides, and SetLoad counts exactly those
// lines (one run per row, at a whole-line stride), so a part is moved by removing and adding
// only the lines between the old and the new range's ends.
class MovingWindow {
 public:
  static constexpr int64_t kAllRows = -1;  // a part over every row of its matrix, one block
  MovingWindow(SetLoad base, const GemmWork& w, int64_t P, int64_t L) : load_(std::move(base)), w_(w), P_(P), L_(L) {}
  const SetLoad& load() const { return load_; }
  // Part i becomes columns [c0, c1) of `v` over round q's blocks (kAllRows: all rows; a
  // round past the last or an empty range: nothing).
  void move(size_t i, const MatrixView& v, int64_t q, int64_t c0, int64_t c1) {
    if (parts_.size() <= i) parts_.resize(i + 1);
    Part nw{&v, q, c0, std::min(c1, v.cols)};
    const int64_t MB = (w_.m + w_.block_rows - 1) / w_.block_rows;
    if (nw.c0 >= nw.c1 || (q != kAllRows && (q < 0 || q * P_ >= MB))) nw = Part{};
    Part& old = parts_[i];
    if (nw.v == old.v && nw.q == old.q && nw.c0 == old.c0 && nw.c1 == old.c1) return;
    if (nw.v && old.v == nw.v && old.q == nw.q && lines_apart(v)) {
      const auto [o0, o1] = line_span(old);
      const auto [n0, n1] = line_span(nw);
      if (o0 <= n1 && n0 <= o1) {  // overlapping line ranges: only the ends move
        if (n0 < o0) add_lines(nw, n0, o0, 1.0);
        if (n0 > o0) add_lines(nw, o0, n0, -1.0);
        if (n1 > o1) add_lines(nw, o1 + 1, n1 + 1, 1.0);
        if (n1 < o1) add_lines(nw, n1 + 1, o1 + 1, -1.0);
        old = nw;
        return;
      }
    }
    add_part(old, -1.0);
    add_part(nw, 1.0);
    old = nw;
  }

 private:
  struct Part {
    const MatrixView* v = nullptr;  // nullptr: empty
    int64_t q = 0, c0 = 0, c1 = 0;
  };
  template <class F>
  void for_blocks(const Part& p, F&& f) const {
    if (p.q == kAllRows) return f(int64_t{0}, p.v->rows);
    const int64_t Mb = w_.block_rows, MB = (w_.m + Mb - 1) / Mb;
    for (int64_t blk = p.q * P_; blk < std::min(MB, (p.q + 1) * P_); ++blk) f(blk * Mb, std::min(Mb, w_.m - blk * Mb));
  }
  void add_part(const Part& p, double times) {
    if (!p.v) return;
    for_blocks(p, [&](int64_t r0, int64_t nr) { load_.add(block_sweeps(*p.v, r0, nr, p.c0, p.c1 - p.c0), times); });
  }
  // Row-major, row strides of whole lines, row 0's last line (at its last byte) before row
  // 1's first: every row's lines are row 0's moved by whole row strides, no two rows share one.
  bool lines_apart(const MatrixView& v) const {
    return v.panel_width == 0 && v.row_stride % L_ == 0 &&
           (v.rows < 2 || (v.addr(0, v.cols - 1) + v.elem - 1) / L_ < v.addr(1, 0) / L_);
  }
  // Row 0's first and last line of the part (lines_apart).
  std::pair<int64_t, int64_t> line_span(const Part& p) const {
    return {static_cast<int64_t>(p.v->addr(0, p.c0) / L_),
            static_cast<int64_t>((p.v->addr(0, p.c1 - 1) + p.v->elem - 1) / L_)};
  }
  // Lines [l0, l1) of row 0, shifted to every row of the part (lines_apart: whole-line strides).
  void add_lines(const Part& p, int64_t l0, int64_t l1, double times) {
    const int64_t rs = p.v->row_stride / L_;
    for_blocks(p, [&](int64_t r0, int64_t nr) {
      load_.add(Sweep{static_cast<uint64_t>((l0 + r0 * rs) * L_), nr, p.v->row_stride, (l1 - l0) * L_}, times);
    });
  }
  SetLoad load_;
  const GemmWork& w_;
  int64_t P_, L_;
  std::vector<Part> parts_;
};

// The lines of rows of columns [c, c + n) of a view, from row 0's address: addr(m, c) is
// addr(0, c) + m x row_stride (MatrixView::addr), and a line's number is a shift when the
// line bytes are a power of two (the same lines as dividing each row's addresses; speed only).
class PanelRows {
 public:
  PanelRows(const MatrixView& v, int64_t c, int64_t n, int64_t L)
      : at0_(v.addr(0, c)), rs_(v.row_stride), bytes_(n * v.elem), line_(L) {}
  // The line of row m's first and last byte of the columns.
  int64_t first_line(int64_t m) const { return line(at0_ + m * rs_); }
  int64_t last_line(int64_t m) const { return line(at0_ + m * rs_ + bytes_ - 1); }

 private:
  int64_t line(uint64_t x) const { return line_(x); }
  uint64_t at0_;
  int64_t rs_, bytes_;
  BlockOf line_;
};

// Counts line l once more in its LLC set (modulo or hashed index, SetIndex) and
// returns the larger of `most` and that set's count. `touched` lists the sets counted so
// far, so the caller can clear `count`.
inline int32_t tally_line(int64_t l, const SetIndex& set_of, std::vector<int32_t>& count,
                          std::vector<int64_t>& touched, int32_t most) {
  const int64_t st = set_of(l);
  if (count[st]++ == 0) touched.push_back(st);
  return std::max(most, count[st]);
}
// Clears what tally_line counted.
inline void clear_tally(std::vector<int32_t>& count, std::vector<int64_t>& touched) {
  for (int64_t st : touched) count[st] = 0;
  touched.clear();
}

// The fullest LLC set of lines tallied one by one (tally_line) or as runs of consecutive
// lines, then taken and cleared with take_most(). Under a modulo index any `sets`
// consecutive lines load every set once, so a run of n lines loads every set n / sets times
// and the n % sets sets from its first line's on (cyclically) once more: those cyclic ranges
// of at least kRangeLines sets are kept as ranges, and the fullest set is found from their
// sorted ends (and, for the sets that lines were also tallied in one by one, their depth
// there) instead of line by line. The same count (speed only).
class SetTally {
 public:
  static constexpr int64_t kRangeLines = 32;
  // `sets` entries of scratch counts (0: nothing can be tallied).
  SetTally(const SetIndex& set_of, int64_t sets) : set_of_(set_of), count_(static_cast<size_t>(sets), 0) {}
  void add_line(int64_t l) { most_ = tally_line(l, set_of_, count_, touched_, most_); }
  // Lines first .. first + n - 1 (short runs inline, without a division; speed only).
  void add_run(int64_t first, int64_t n) {
    if (n < kRangeLines) {
      for (int64_t l = first; l < first + n; ++l) add_line(l);
      return;
    }
    add_long_run(first, n);
  }
  // The lines of the bytes [lo, hi] (lines of L bytes; a shift when L is a power of two,
  // speed only).
  void add_bytes(uint64_t lo, uint64_t hi, int64_t L) {
    const BlockOf line_of(L);
    const int64_t first = line_of(lo);
    add_run(first, line_of(hi) - first + 1);
  }
  // The lines of `sw`, at least as often per set as SetLoad::add counts them (setload.cpp): a
  // run (count 1, or segments that touch or overlap) each line once, a strided sweep segment
  // by segment without merging lines shared by neighbours. An upper bound on a window's
  // per-set load built from the same sweeps, so a window whose bound is at most the ways
  // cannot overflow.
  void add_sweep(const Sweep& sw, int64_t L);
  // A lower bound on the fullest set so far (exact when no range is kept), without taking it.
  int32_t at_least() const { return static_cast<int32_t>(turns_) + most_; }
  // The fullest set so far; the tally starts again from nothing.
  int32_t take_most();

 private:
  void add_long_run(int64_t first, int64_t n);  // n >= kRangeLines
  SetIndex set_of_;
  std::vector<int32_t> count_;
  std::vector<int64_t> touched_;
  int32_t most_ = 0;   // the fullest set of the lines tallied one by one
  int64_t turns_ = 0;  // whole turns of the set index, in every set
  std::vector<std::pair<int64_t, int32_t>> ends_;  // the ranges' [first, end) as (set, +1) and (set, -1)
  std::vector<std::pair<int64_t, int32_t>> depth_;  // take_most's scratch: (set, depth from it on)
};

// The most lines any set holds among the lines of `v` (a line repeated by consecutive
// segments counted once; other repeats count again, which only raises the result), counted
// in `tally` (empty; left empty). Once the fullest set passes `limit` the count may stop
// (after the segment it is in): then the result is some value above `limit`, which is all a
// skip test comparing it with a budget needs (speed only).
int32_t most_lines_in_a_set(const std::vector<Sweep>& v, int64_t L, SetTally& tally,
                            int32_t limit = std::numeric_limits<int32_t>::max());

}  // namespace bertlab::hw::analytic_detail

// The counting helpers of the analytic model (hwmodel/writequeue.h, hwmodel/setload.h)
// against exact enumeration, line by line, on small random sweeps.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "hwmodel/analytic_detail.h"
#include "hwmodel/setload.h"
#include "hwmodel/writequeue.h"

using namespace bertlab::hw;

namespace {

// The distinct lines of a sweep in visiting order (a line shared with the previous segment
// once).
std::vector<int64_t> sweep_lines(const Sweep& s, int64_t L) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.count; ++i) {
    const uint64_t a = s.start + i * s.stride;
    for (int64_t l = a / L; l <= static_cast<int64_t>((a + s.width - 1) / L); ++l)
      if (out.empty() || out.back() != l) out.push_back(l);
  }
  return out;
}

// The trace simulator's write queue (tracesim.cpp), one line at a time.
struct LineQueue {
  LineQueue(int64_t line, int64_t row, int64_t d) : L(line), R(row), depth(d) {}
  int64_t L, R, depth, open = -1, misses = 0;
  std::vector<int64_t> q;
  void drain() {
    const int64_t row = q.front() * L / R;
    std::vector<int64_t> keep;
    for (int64_t l : q) {
      if (l * L / R != row) {
        keep.push_back(l);
        continue;
      }
      if (row != open) ++misses;
      open = row;
    }
    q = keep;
  }
  void push(int64_t line) {
    q.push_back(line);
    if (static_cast<int64_t>(q.size()) >= depth) drain();
  }
};

Sweep random_sweep(std::mt19937& rng) {
  Sweep s{static_cast<uint64_t>(rng() % 20000), 1 + int64_t(rng() % 60), 0, 1 + int64_t(rng() % 200)};
  s.stride = (rng() % 3 == 0) ? s.width : s.width + int64_t(rng() % 700);
  return s;
}

}  // namespace

TEST_CASE("write queue row misses match a line-by-line queue", "[hwmodel]") {
  std::mt19937 rng(11);
  for (int it = 0; it < 200; ++it) {
    const int64_t L = 64, R = int64_t{256} << (rng() % 3), depth = 1 + rng() % 70;
    WriteQueue wq(L, R, depth);
    LineQueue ref(L, R, depth);
    const int sweeps = 1 + rng() % 6;
    for (int k = 0; k < sweeps; ++k) {
      const Sweep s = random_sweep(rng);
      wq.push(s, 1 << 30);
      for (int64_t l : sweep_lines(s, L)) ref.push(l);
      REQUIRE(wq.row_misses() == ref.misses);
    }
    wq.drain_all();
    while (!ref.q.empty()) ref.drain();
    REQUIRE(wq.row_misses() == ref.misses);
  }
}

TEST_CASE("write queue: a long regular sweep charged at its settled drain rate", "[hwmodel]") {
  // Column strips of a row-major matrix (one line per row) written back strip by strip:
  // followed for four queue depths of runs per strip, the rest extrapolated.
  const int64_t L = 64, R = 1024, rows = 1000, ld = 512;
  WriteQueue capped(L, R, 64), exact(L, R, 64);
  for (int64_t strip = 0; strip < ld / L; ++strip) {
    const Sweep s{static_cast<uint64_t>(strip * L), rows, ld, L};
    capped.push(s, 64);
    exact.push(s, rows);
  }
  capped.drain_all();
  exact.drain_all();
  CHECK(std::abs(capped.row_misses() - exact.row_misses()) <= 0.02 * exact.row_misses());
}

// Modulo and hashed (XOR-folded) set indexes: the per-set counts of SetLoad's closed forms
// (whole turns of the index, aligned blocks under the hash) against a line-by-line tally
// through CacheDesc::set_of.
// The hashed index is a bijection on each aligned block of `sets` lines (so contiguous data
// fills the sets evenly) and spreads a power-of-two stride over the sets, which the modulo
// index folds onto one set.
TEST_CASE("hashed set index: a bijection on aligned blocks that spreads strides", "[hwmodel]") {
  for (int64_t ways : {1, 2, 8}) {
    const CacheDesc hashed{16384, ways, 64, 1, true}, modulo{16384, ways, 64, 1, false};
    const int64_t sets = hashed.sets();
    for (int64_t block : {0, 1, 7, 1000}) {
      std::vector<int> seen(sets, 0);
      for (int64_t l = block * sets; l < (block + 1) * sets; ++l) seen[hashed.set_of(l)] += 1;
      CHECK(std::count(seen.begin(), seen.end(), 1) == sets);
    }
    std::vector<int64_t> h, m;
    for (int64_t i = 0; i < ways * 4; ++i) {
      h.push_back(hashed.set_of(i * sets));
      m.push_back(modulo.set_of(i * sets));
    }
    std::sort(h.begin(), h.end());
    CHECK(std::unique(h.begin(), h.end()) - h.begin() == static_cast<int64_t>(h.size()));
    CHECK(std::count(m.begin(), m.end(), m[0]) == static_cast<int64_t>(m.size()));
  }
}

TEST_CASE("SetLoad counts each set's lines as enumeration does", "[hwmodel]") {
  std::mt19937 rng(5);
  for (int it = 0; it < 600; ++it) {
    CacheDesc c{int64_t{64} * 64 << (rng() % 3), int64_t{1} << (rng() % 4), 64, 1, it % 2 == 1};
    const int64_t sets = c.sets(), L = c.line_bytes;
    SetLoad load(c), other(c);
    std::vector<double> per_set(sets, 0), other_set(sets, 0);
    const int sweeps = 1 + rng() % 4;
    for (int k = 0; k < sweeps; ++k) {
      Sweep s = random_sweep(rng);
      if (rng() % 2) s.stride = s.width + L * (rng() % 9);  // whole-line strides too
      if (rng() % 2) s.start = s.start / L * L;
      if (k == 0 && rng() % 2) s = {s.start, 1, 0, L * (sets * int64_t(1 + rng() % 3) + int64_t(rng() % sets))};
      if (k == 0) s.stride = std::max(s.stride, s.width);  // one run over several turns
      s.start += k * 1000000;  // sweeps of one footprint touch disjoint lines
      load.add(s);
      for (int64_t l : sweep_lines(s, L)) per_set[c.set_of(l)] += 1;
      const Sweep o{s.start + 500000, 1 + int64_t(rng() % 3) * 40, L, L};
      other.add(o);
      for (int64_t l : sweep_lines(o, L)) other_set[c.set_of(l)] += 1;
    }
    double total = 0, over = 0;
    for (int64_t i = 0; i < sets; ++i) {
      total += per_set[i];
      if (per_set[i] + other_set[i] > c.ways) over += per_set[i];
    }
    SetLoad window = load;
    window.add(other);
    REQUIRE(load.total() == Approx(total));
    REQUIRE(load.min_load() == Approx(*std::min_element(per_set.begin(), per_set.end())));
    REQUIRE(load.lines_over(window) == Approx(over));
    std::vector<Sweep> v{Sweep{static_cast<uint64_t>(rng() % 5000), 1 + int64_t(rng() % 30), 64 + int64_t(rng() % 300), 1 + int64_t(rng() % 64)}};
    int64_t n_over = 0;
    for (int64_t l : sweep_lines(v[0], L)) n_over += per_set[c.set_of(l)] + other_set[c.set_of(l)] > c.ways;
    REQUIRE(lines_of(window.overflowing_lines(v), L) == n_over);
  }
}

// overflowing_lines lists, in order, the runs of consecutive lines of a list of sweeps that
// lie in sets the window overflows (a line repeated by consecutive segments or sweeps once),
// one sweep (count 1, stride = width) per run: checked sweep by sweep against enumeration,
// for windows built with additions and removals (add with times -1, add_line), modulo
// indexes of power-of-two and other set counts and hashed ones. overflowing_reads lists the
// same lines, and DRAM reads of its list cost the same.
TEST_CASE("SetLoad::overflowing_lines lists the runs of overflowing lines as enumeration does", "[hwmodel]") {
  std::mt19937 rng(23);
  for (int it = 0; it < 600; ++it) {
    const int64_t sets_kind = rng() % 3;  // 64 << k sets, or 3 x 64 (not a power of two)
    const int64_t size = sets_kind == 2 ? 3 * 64 * 64 : int64_t{64} * 64 << (rng() % 3);
    const CacheDesc c{size * 2, int64_t{2} << (rng() % 3), 64, 1, sets_kind != 2 && it % 2 == 1};
    const int64_t sets = c.sets(), L = c.line_bytes;
    SetLoad win(c);
    std::vector<int64_t> per_set(sets, 0);
    for (int k = 0; k < 1 + int(rng() % 5); ++k) {
      Sweep sw = random_sweep(rng);
      if (rng() % 2) sw.stride = sw.width + L * (rng() % 9);
      sw.start += k * 1000000;
      win.add(sw);
      for (int64_t l : sweep_lines(sw, L)) per_set[c.set_of(l)] += 1;
      if (rng() % 3 == 0) {  // taken back out again
        win.add(sw, -1.0);
        for (int64_t l : sweep_lines(sw, L)) per_set[c.set_of(l)] -= 1;
      }
    }
    for (int k = 0; k < int(rng() % 40); ++k) {
      const int64_t l = rng() % 4000, n = rng() % 2 ? 1 : -1;
      if (n < 0 && per_set[c.set_of(l)] == 0) continue;
      win.add_line(l, static_cast<double>(n));
      per_set[c.set_of(l)] += n;
    }
    std::vector<Sweep> v;
    for (int k = 0; k < 1 + int(rng() % 4); ++k) {
      Sweep sw = random_sweep(rng);
      if (rng() % 2) sw.stride = sw.width + L * (rng() % 5);
      if (!v.empty() && rng() % 2) sw.start = v.back().end() - (rng() % 2 ? 1 : 0);  // joins or shares a line
      if (rng() % 3 == 0) {  // a line-wide strip: segments inside one line each, at a whole-line stride
        const int64_t at = static_cast<int64_t>(sw.start % L);
        sw.width = 1 + static_cast<int64_t>(rng() % (L - at));
        sw.stride = L * static_cast<int64_t>(rng() % 7);  // 0: the same line again
        sw.count = 2 + static_cast<int64_t>(rng() % 40);
      }
      v.push_back(sw);
    }
    std::vector<int64_t> all;  // v's lines in order, a line repeated in a row once
    for (const auto& sw : v)
      for (int64_t l : sweep_lines(sw, L))
        if (all.empty() || all.back() != l) all.push_back(l);
    std::vector<Sweep> want;
    for (int64_t l : all) {
      if (per_set[c.set_of(l)] <= c.ways) continue;
      const uint64_t at = static_cast<uint64_t>(l) * L;
      if (!want.empty() && want.back().end() == at) want.back().width += L, want.back().stride = want.back().width;
      else want.push_back({at, 1, L, L});
    }
    const auto got = win.overflowing_lines(v);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].start == want[i].start);
      CHECK(got[i].count == 1);
      CHECK(got[i].stride == want[i].stride);
      REQUIRE(got[i].width == want[i].width);
    }
    // overflowing_reads: the same lines in the same order (strided runs when v is one
    // line-wide strip), and reading either list costs the same lines and row misses.
    const auto reads = win.overflowing_reads(v);
    std::vector<int64_t> listed, wanted;
    for (const auto& sw : reads)
      for (int64_t l : sweep_lines(sw, L)) listed.push_back(l);
    for (const auto& sw : want)
      for (int64_t l : sweep_lines(sw, L)) wanted.push_back(l);
    REQUIRE(listed == wanted);
    if (v.size() == 1 && v[0].count > 1 && v[0].stride >= L && v[0].stride % L == 0 && static_cast<int64_t>(v[0].start % L) + v[0].width <= L)
      CHECK(reads.size() <= want.size());
    for (const int64_t row : {int64_t{128}, int64_t{8192}}) {
      SystemDesc sys;
      sys.llc = c;
      sys.dram.row_bytes = row;
      Traffic t_lines, t_reads;
      analytic_detail::DramStreams by_lines(sys, t_lines), by_reads(sys, t_reads);
      by_lines.sweeps("a", false, 0, want);
      by_reads.sweeps("a", false, 0, reads);
      CHECK(t_reads.read_lines() == t_lines.read_lines());
      CHECK(t_reads.row_misses() == t_lines.row_misses());
    }
  }
}

// What SetTally::add_sweep counts per set, line by line: a run (one segment, or segments
// that touch or overlap) each line once, a strided sweep each segment's lines.
static std::vector<int32_t> tally_by_lines(const std::vector<Sweep>& v, int64_t L, const SetIndex& set_of,
                                           int64_t sets) {
  std::vector<int32_t> per_set(sets, 0);
  for (const auto& s : v) {
    if (s.count == 1 || s.stride <= s.width) {
      for (uint64_t l = s.start / L; l <= (s.end() - 1) / L; ++l) per_set[set_of(static_cast<int64_t>(l))] += 1;
      continue;
    }
    for (int64_t i = 0; i < s.count; ++i) {
      const uint64_t at = s.start + i * s.stride;
      for (uint64_t l = at / L; l <= (at + s.width - 1) / L; ++l) per_set[set_of(static_cast<int64_t>(l))] += 1;
    }
  }
  return per_set;
}

// The skip test of the set-resolved BWMA windows (analytic_bwma.cpp) rests on SetTally
// counting every set at least as often as SetLoad does, whatever the sweeps: lines shared
// by segments or by sweeps, misaligned starts, whole-line strides, hashed indexes. With
// `ways` equal to the fullest tallied set no line of the window may overflow; and the
// tally is no bound at all if it undercounts one set, so each set is checked against a
// line-by-line enumeration too.
TEST_CASE("SetTally bounds SetLoad's per-set load", "[hwmodel]") {
  using namespace bertlab::hw::analytic_detail;
  std::mt19937 rng(11);
  for (int it = 0; it < 400; ++it) {
    const int64_t L = 64, sets = int64_t{1} << (2 + rng() % 6);
    const bool hashed = it % 2 == 1;
    std::vector<Sweep> v;
    const int n = 1 + rng() % 4;
    for (int k = 0; k < n; ++k) {
      Sweep s = random_sweep(rng);
      if (rng() % 2) s.stride = s.width + L * (rng() % 5);
      if (rng() % 3 == 0) s.stride = L * (1 + rng() % 4);  // whole-line strides, misaligned starts
      s.stride = std::max(s.stride, int64_t{1});
      if (s.stride < s.width && rng() % 2) s.stride = s.width;  // else overlapping segments: a run
      if (k > 0 && rng() % 2) s.start = v.back().start + rng() % 200;  // lines shared between sweeps
      v.push_back(s);
    }
    const CacheDesc probe{sets * L, 1, L, 1, hashed};
    const SetIndex set_of(probe);
    SetTally tally(set_of, sets);
    for (const auto& s : v) tally.add_sweep(s, L);
    const int32_t most = tally.take_most();
    const std::vector<int32_t> tallied = tally_by_lines(v, L, set_of, sets);
    // The fullest set is what the tally says.
    REQUIRE(most == *std::max_element(tallied.begin(), tallied.end()));
    // Every set: at least the distinct lines of each sweep (what SetLoad counts at least).
    std::vector<int32_t> distinct(sets, 0);
    for (const auto& s : v) {
      auto lines = sweep_lines(s, L);
      std::sort(lines.begin(), lines.end());
      lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
      for (int64_t l : lines) distinct[set_of(l)] += 1;
    }
    for (int64_t i = 0; i < sets; ++i) REQUIRE(tallied[i] >= distinct[i]);
    // A cache of the same sets and `most` ways: SetLoad finds no overflowing set.
    const CacheDesc c{sets * most * L, most, L, 1, hashed};
    REQUIRE(c.sets() == sets);
    if (!SetLoad::resolves_sets(c)) continue;
    SetLoad load(c);
    load.add(v);
    for (const auto& s : v)
      for (int64_t l : sweep_lines(s, L)) REQUIRE_FALSE(load.overflowing(l));
  }
}

// SetTally keeps long runs under a modulo index as cyclic ranges of sets and finds the
// fullest set from their ends and from the sets tallied line by line. Against a line-by-line
// count: runs from 1 line to several turns of the index, short and strided sweeps beside
// them, power-of-two and other set counts, a hashed index (line by line throughout), and a
// tally taken twice (take_most starts again from nothing).
TEST_CASE("SetTally's ranges give the line-by-line fullest set", "[hwmodel]") {
  using namespace bertlab::hw::analytic_detail;
  std::mt19937 rng(5);
  const int64_t L = 64;
  for (int it = 0; it < 300; ++it) {
    const int64_t sets = (it % 3 == 0) ? 1536 : int64_t{64} << (rng() % 6);  // 1536: modulo, not a mask
    const bool hashed = it % 5 == 4 && sets != 1536;
    const CacheDesc probe{sets * L, 1, L, 1, hashed};
    const SetIndex set_of(probe);
    SetTally tally(set_of, sets);
    for (int take = 0; take < 2; ++take) {
      std::vector<Sweep> v;
      const int n = 1 + rng() % 6;
      for (int k = 0; k < n; ++k) {
        const uint64_t start = static_cast<uint64_t>(rng() % (8 * sets)) * L + rng() % L;
        const int64_t kind = rng() % 3;
        if (kind == 0) {  // a long run: up to about three turns of the index
          v.push_back(Sweep{start, 1, 0, 1 + static_cast<int64_t>(rng() % (3 * sets * L))});
        } else if (kind == 1) {  // a short run
          v.push_back(Sweep{start, 1, 0, 1 + static_cast<int64_t>(rng() % (40 * L))});
        } else {  // strided rows of 1 to 40 lines
          const int64_t width = 1 + static_cast<int64_t>(rng() % (40 * L));
          v.push_back(Sweep{start, 1 + static_cast<int64_t>(rng() % 50), width + L * static_cast<int64_t>(rng() % 64), width});
        }
        v.back().stride = std::max(v.back().stride, v.back().width);
      }
      for (const auto& s : v) tally.add_sweep(s, L);
      const auto want = tally_by_lines(v, L, set_of, sets);
      REQUIRE(tally.take_most() == *std::max_element(want.begin(), want.end()));
    }
  }
}

// SweepRuns (analytic_detail.h) keeps the set-resolved RWMA k-step miss lists as stored
// bodies repeated, and units repeated as groups. Random bodies (runs of lines that may
// touch the list's last sweep, so the merge rule applies), appended any number of times,
// with units begun and repeated: the list must be the one that appending every copy run by
// run gives, and DramStreams must count it (reads and write-backs) as the expanded list.
TEST_CASE("SweepRuns: repeated bodies and units give the list and DRAM counts of every copy", "[hwmodel]") {
  using namespace bertlab::hw::analytic_detail;
  std::mt19937 rng(29);
  const int64_t L = 64;
  SystemDesc s;
  s.llc.line_bytes = L;
  s.dram.row_bytes = 8 * L;
  for (int it = 0; it < 400; ++it) {
    SweepRuns runs;
    std::vector<Sweep> expect;  // every copy appended run by run
    auto append_ref = [&](const std::vector<Sweep>& body) {
      for (const auto& sw : body) {
        if (!expect.empty() && expect.back().end() == sw.start) {
          expect.back().width += sw.width;
          expect.back().stride = expect.back().width;
        } else {
          expect.push_back(sw);
        }
      }
    };
    std::vector<std::pair<size_t, size_t>> stored;
    std::vector<std::vector<Sweep>> bodies;
    std::vector<size_t> unit;  // the bodies appended since begin_unit (not its repetitions)
    bool repeated = false, added_after = false;
    const int ops = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < ops; ++k) {
      const uint32_t what = rng() % 8;
      if (what == 0 || stored.empty()) {
        std::vector<Sweep> body;
        const int n = 1 + static_cast<int>(rng() % 4);
        for (int q = 0; q < n; ++q) {
          const int64_t first = static_cast<int64_t>(rng() % 48), w = 1 + static_cast<int64_t>(rng() % 3);
          const Sweep sw{static_cast<uint64_t>(first * L), 1, w * L, w * L};
          if (!body.empty() && body.back().end() == sw.start) continue;  // runs of a body do not touch
          body.push_back(sw);
        }
        stored.push_back(runs.put(body));
        bodies.push_back(body);
      } else if (what <= 4) {
        const size_t x = rng() % stored.size();
        const int64_t times = rng() % 5 == 0 ? 20 + static_cast<int64_t>(rng() % 200) : 1 + static_cast<int64_t>(rng() % 3);
        runs.add(stored[x].first, stored[x].second, times);
        for (int64_t t = 0; t < times; ++t) append_ref(bodies[x]), unit.push_back(x);
        added_after = repeated;
      } else if (what == 5) {
        runs.begin_unit();
        unit.clear();
        repeated = added_after = false;
      } else if (runs.repeat_unit()) {
        REQUIRE(!added_after);  // a unit added to after its repetition is no unit any more
        REQUIRE(!unit.empty());
        for (size_t x : unit) append_ref(bodies[x]);
        repeated = true;
      }
    }
    std::vector<Sweep> got;
    runs.for_each_copy([&](const SweepRuns::Seg& g) {
      for (int64_t t = 0; t < g.times; ++t)
        for (size_t x = g.begin; x < g.end; ++x) got.push_back(runs.pool()[x]);
      return true;
    });
    REQUIRE(got.size() == expect.size());
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i].start == expect[i].start);
      REQUIRE(got[i].width == expect[i].width);
    }
    // DRAM counts: the runs as DramStreams takes them, against the expanded list.
    Traffic t1 = empty_traffic(s, 1), t2 = empty_traffic(s, 1);
    DramStreams d1(s, t1), d2(s, t2);
    d1.sweeps("y", false, 0, expect);
    d1.sweeps("y", true, 0, expect);
    d2.sweeps("y", false, 0, runs);
    d2.sweeps("y", true, 0, runs);
    d1.flush_all();
    d2.flush_all();
    REQUIRE(t1.operands["y"].read_lines == t2.operands["y"].read_lines);
    REQUIRE(t1.operands["y"].write_lines == t2.operands["y"].write_lines);
    REQUIRE(t1.operands["y"].row_misses == t2.operands["y"].row_misses);
    REQUIRE(t1.llc_misses[0] == t2.llc_misses[0]);
  }
}

// MovingWindow (analytic_detail.h) moves a set-resolved reuse window from one window to the
// next by removing and adding lines (SetLoad::add with times -1; for matrices whose rows sit
// apart in lines, only the lines between the old and the new column bounds). Random
// matrices (row strides of whole lines or not, rows apart or sharing lines, misaligned
// bases), random parts (round blocks or all rows, column ranges that overlap, move apart or
// empty), modulo and hashed indexes: after every move, every set's load must be exactly that
// of the window built from scratch (the base plus each part's block sweeps).
TEST_CASE("MovingWindow: a moved window has the per-set loads of one built from scratch", "[hwmodel]") {
  using namespace bertlab::hw::analytic_detail;
  std::mt19937 rng(37);
  const int64_t L = 64;
  for (int it = 0; it < 200; ++it) {
    const int64_t sets = int64_t{1} << (2 + rng() % 6);
    const CacheDesc c{sets * 2 * L, 2, L, 1, it % 3 == 2};
    GemmWork w;
    w.m = 1 + rng() % 24;
    w.block_rows = 1 + rng() % 6;
    const int64_t P = 1 + rng() % 3, MB = (w.m + w.block_rows - 1) / w.block_rows, R = (MB + P - 1) / P;
    std::vector<MatrixView> views(3);
    uint64_t at = 0;
    for (auto& v : views) {
      v.elem = rng() % 2 ? 4 : 2;
      v.rows = w.m;
      v.cols = 1 + rng() % 80;
      const int64_t row = v.cols * v.elem;
      switch (rng() % 3) {
        case 0: v.row_stride = (row + L - 1) / L * L + L * (rng() % 3); break;  // whole lines
        case 1: v.row_stride = row; break;                                      // contiguous rows
        default: v.row_stride = row + v.elem * (rng() % 40); break;             // any
      }
      v.base = at + (rng() % 4 == 0 ? v.elem * (rng() % 16) : 0);
      at = v.base + v.rows * v.row_stride + L * (rng() % 50);
    }
    SetLoad base(c);
    base.add(random_sweep(rng));
    MovingWindow win(base, w, P, L);
    struct Part {
      const MatrixView* v = nullptr;
      int64_t q = 0, c0 = 0, c1 = 0;
    };
    std::vector<Part> parts(4);
    for (int step = 0; step < 40; ++step) {
      const size_t i = rng() % parts.size();
      const MatrixView& v = views[rng() % 3 == 0 ? rng() % 3 : i % 3];  // mostly the same matrix per part
      const int64_t q = rng() % 6 == 0 ? MovingWindow::kAllRows : static_cast<int64_t>(rng() % (R + 1)) - (rng() % 8 == 0);
      int64_t c0 = rng() % (v.cols + 1), c1 = rng() % (v.cols + 8);
      if (parts[i].v == &v && rng() % 2) c0 = parts[i].c0 + static_cast<int64_t>(rng() % 9) - 4;  // ends that move a little
      c0 = std::max<int64_t>(0, c0);
      win.move(i, v, q, c0, c1);
      parts[i] = {&v, q, c0, c1};
      SetLoad ref = base;
      for (const auto& p : parts) {
        if (!p.v) continue;
        const int64_t e1 = std::min(p.c1, p.v->cols);
        if (p.c0 >= e1) continue;
        if (p.q == MovingWindow::kAllRows) {
          ref.add(block_sweeps(*p.v, 0, p.v->rows, p.c0, e1 - p.c0));
          continue;
        }
        for (int64_t blk = p.q * P; p.q >= 0 && blk < std::min(MB, (p.q + 1) * P); ++blk)
          ref.add(block_sweeps(*p.v, blk * w.block_rows, std::min(w.block_rows, w.m - blk * w.block_rows), p.c0,
                               e1 - p.c0));
      }
      for (int64_t l = 0; l < sets; ++l) REQUIRE(win.load().set_load(l) == ref.set_load(l));
    }
  }
}

// A large hashed LLC of 8+ ways is not resolved per set (setload.h): its windows are spread,
// a per-set load distribution (whole turns of the index plus one random part per footprint).
// Checked against the hash itself: random footprints (runs of 0.1 to 2.5 turns of the index
// at random line addresses), their lines counted per set through CacheDesc::set_of, and the
// share of one footprint's lines in sets the window overflows, averaged over random
// placements, against SetLoad's lines_over (which does not depend on the placement) and the
// DRAM line reads of DramStreams::missing.
TEST_CASE("spread hashed LLC: the overflowing share against the hash's own per-set counts", "[hwmodel]") {
  using namespace bertlab::hw::analytic_detail;
  std::mt19937 rng(41);
  for (int64_t ways : {8, 16}) {
    const CacheDesc c{1 << 20, ways, 64, 20, true};
    REQUIRE_FALSE(SetLoad::resolves_sets(c));
    const int64_t sets = c.sets(), L = c.line_bytes;
    for (int shape = 0; shape < 6; ++shape) {
      // Footprint sizes in lines whose mean load per set comes close to the ways.
      std::vector<int64_t> sizes;
      int64_t lines = 0;
      while (lines < (ways - 2) * sets) {
        sizes.push_back(sets / 10 + int64_t(rng() % (sets * 12 / 5)));
        lines += sizes.back();
      }
      sizes.push_back(sets / 10 + int64_t(rng() % (sets * 2)));
      SetLoad window(c), mine(c);
      auto run = [&](uint64_t first_line, int64_t n) { return Sweep{first_line * L, 1, n * L, n * L}; };
      for (size_t f = 0; f < sizes.size(); ++f) {
        window.add(std::vector<Sweep>{run(f << 24, sizes[f])});
        if (f == 0) mine.add(std::vector<Sweep>{run(0, sizes[0])});
      }
      const double model = mine.lines_over(window) / mine.total();
      double measured = 0;
      const int trials = 60;
      for (int t = 0; t < trials; ++t) {
        std::vector<int32_t> per_set(sets, 0);
        std::vector<int64_t> first(sizes.size());
        for (size_t f = 0; f < sizes.size(); ++f) {
          first[f] = (int64_t(f) << 26) + int64_t(rng() % (1 << 24)) * 3;  // disjoint, random placement
          for (int64_t l = first[f]; l < first[f] + sizes[f]; ++l) per_set[c.set_of(l)] += 1;
        }
        int64_t over = 0;
        for (int64_t l = first[0]; l < first[0] + sizes[0]; ++l) over += per_set[c.set_of(l)] > ways;
        measured += static_cast<double>(over) / static_cast<double>(sizes[0]) / trials;
      }
      INFO(ways << "w " << sizes.size() << "f load " << window.total() / sets << " model " << model << " hash "
                << measured);
      CHECK(std::abs(model - measured) <= 0.07);
      // DRAM reads of the footprint's lines that the window evicts: the same share.
      Traffic t = empty_traffic(SystemDesc{}, 1);
      DramStreams dram(SystemDesc{}, t);
      const std::vector<Sweep> v{run(0, sizes[0])};
      dram.missing("A", false, 0, v, 3, window);
      CHECK(std::abs(static_cast<double>(t.operands["A"].read_lines) - 3 * model * sizes[0]) <= 3);
    }
  }
}

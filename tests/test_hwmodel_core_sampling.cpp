// The sampled core walk ("core_walk": "sampled", core_walk.h gemm_share and line_share) against the
// exact walk on GEMMs and streams small enough to walk exactly: the instruction model's events
// equal, the cache, TLB and DRAM counts and the core model's cycles within tolerances, with far
// fewer steps walked.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "hwmodel/core_model.h"
#include "hwmodel/core_walk.h"
#include "hwmodel/latency.h"

using namespace bertlab;
using namespace bertlab::hw;

namespace {

struct Walked {
  int64_t units = 0, groups = 0, issues = 0, steps = 0;
  std::vector<int64_t> l1_as;  // per core: CoreShare::l1_as
  std::vector<int64_t> tlb;
  Traffic traffic;
  double cycles = 0;
};

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// `instances` products Y (M x N) += A (M x K) B (K x N), each operand in its own page-aligned
// region as the estimate's allocator places them, walked by every core of `s` with `walk`.
Walked walk_gemm(SystemDesc s, CoreWalk walk, Arrangement a, int64_t M, int64_t K, int64_t N, int64_t instances) {
  s.core_walk = walk;
  const int64_t S = s.array.kernel;
  GemmWork w;
  w.arrangement = a, w.S = S, w.m = M, w.k = round_up(K, S), w.n = round_up(N, S), w.block_rows = s.rwma_block_rows;
  uint64_t base = uint64_t{1} << 30;
  auto place = [&](int64_t rows, int64_t cols) {
    const MatrixView v = make_view(a, base, rows, cols, 1, S);
    base += static_cast<uint64_t>(round_up(view_bytes(a, rows, cols, 1, S), 4096));
    return v;
  };
  for (int64_t i = 0; i < instances; ++i) {
    const MatrixView av = place(M, K);
    // The weight as the estimate packs it: S x S tiles under BWMA ([N/S][K][S]), row-major under RWMA.
    const MatrixView bv = place(w.k, w.n);
    w.instances.push_back({av, bv, place(M, N)});
  }
  CoreSim sim(s);
  const int ia = sim.operand("A"), ib = sim.operand("B"), iy = sim.operand("Y");
  std::vector<CoreShare> shares;
  for (int64_t c = 0; c < s.cores; ++c) shares.push_back(gemm_share(w, s, c, ia, ib, iy));
  Walked r;
  for (const CoreShare& c : shares) r.l1_as.push_back(c.l1_as);
  for (const int64_t n : sim.run(shares)) r.steps += n;
  r.traffic = sim.finish();
  r.tlb = sim.tlb_misses();
  const auto k = builtin_coefficients(s.core_isa).entries.at({LayerOp::ffn_in, a, S});
  std::vector<double> instr;
  std::vector<int64_t> issues;
  for (const CoreShare& c : shares) {
    r.units += c.units, r.groups += c.groups, r.issues += c.issues;
    instr.push_back(std::round(k[0] * c.units + k[1] * c.groups));
    issues.push_back(c.issues);
  }
  r.cycles = core_time(instr, issues, r.tlb, r.traffic, s).total();
  return r;
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
}

double rel(double sampled, double exact) { return exact == 0 ? std::abs(sampled) : std::abs(sampled - exact) / exact; }

}  // namespace

// The split walk of a sampled GEMM (core_walk_gemm.cpp gemm_share: an LLC pass over every tile, an L1
// pass over representative blocks) against the exact walk, on cases where the split engages:
// square and wide GEMMs on 1 and 2 cores (one, BERT-large's attention output at S = 4 under RWMA,
// where the L1 pass walks between a quarter and a half of the steps; one of four sequence blocks on
// 2 cores, whose second core counts the first's L1 pass, and one of three, two on the first core
// and one on the second, which walks its own, as does one of two blocks 16 KB apart with a TLB of
// 16 sets); one with a partial sequence block (M 136: tiles of 128 rows and of 8, which a block
// may stand only for tiles of its own shape) and partial K and N chunks, whose RWMA rows of 16392
// bytes make the hashed LLC evict lines early (the LLC pass may skip a recent touch only when it
// would have hit).
// Tolerances: cycles within 1%; L1 misses within 5% (a block's L1 sets depend on its place);
// LLC misses and DRAM bytes within 2% (the LLC pass touches every tile's lines; its order within
// a tile and the rectangles it skips as recently touched are what differ); TLB misses within
// 10%, or, when page walks are rare (hundreds in a GEMM, which the blocks sample coarsely), their
// cycles within 0.5% of the GEMM's. A lost or misplaced weight is off by the
// sampling factor (4x and more).
TEST_CASE("in_order_core: the sampled walk gives the exact walk's counts on GEMMs", "[hwmodel][core][sampling]") {
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  struct Case {
    int64_t m, k, n, instances, S, P;
    Arrangement a;
    int64_t saving = 4;  // at least this many times fewer L1-pass steps than the exact walk's
    int64_t core1_l1_as = -1;  // on 2 cores: 0 when core 1's tiles are core 0's moved by whole L1 and TLB set spans
    int64_t tlb_ways = 0;      // the system's: fully associative (0), or 16 sets of 4 ways
  };
  const Case c = GENERATE(Case{128, 1024, 1024, 1, 4, 1, Arrangement::bwma}, Case{128, 1024, 1024, 1, 8, 2, Arrangement::bwma},
                          Case{136, 264, 8200, 1, 8, 1, Arrangement::bwma}, Case{64, 1024, 4096, 1, 4, 1, Arrangement::rwma},
                          Case{128, 1024, 4096, 1, 8, 1, Arrangement::rwma}, Case{128, 1024, 4096, 1, 8, 2, Arrangement::rwma},
                          Case{136, 264, 16392, 1, 8, 1, Arrangement::rwma},
                          Case{128, 1024, 1280, 1, 4, 1, Arrangement::rwma, 2},
                          Case{128, 16384, 256, 1, 8, 1, Arrangement::bwma},
                          Case{512, 1024, 1024, 1, 8, 2, Arrangement::rwma, 4, 0},
                          Case{384, 1024, 1024, 1, 8, 2, Arrangement::rwma, 2},
                          Case{256, 128, 16384, 1, 8, 2, Arrangement::rwma, 2, -1, 4});
  s.array.kernel = c.S;
  s.cores = c.P;
  s.tlb.ways = c.tlb_ways;
  const std::string what = fmt::format("M {} K {} N {} x {}, S = {}, {} core(s), {}", c.m, c.k, c.n, c.instances, c.S, c.P,
                                       to_string(c.a));
  INFO(what);
  const Walked e = walk_gemm(s, CoreWalk::exact, c.a, c.m, c.k, c.n, c.instances);
  const Walked x = walk_gemm(s, CoreWalk::sampled, c.a, c.m, c.k, c.n, c.instances);
  // The instruction model's events are closed forms over the whole schedule: equal.
  CHECK(x.units == e.units);
  CHECK(x.groups == e.groups);
  CHECK(x.issues == e.issues);
  // The split engaged: the L1 pass walks a fraction of the steps.
  CHECK(x.steps * c.saving <= e.steps);
  // Core 1 counts core 0's L1 pass instead of walking its own (CoreShare::l1_as) where its tiles
  // are core 0's moved by whole L1 and TLB set spans under RWMA (two sequence blocks of 128 rows
  // of 1024 bytes apart), not where core 1 has none (one sequence block) or fewer (three blocks:
  // two and one) or where a move of 16 KB (a block of rows of 128 bytes) keeps the L1's sets but
  // not those of a TLB of 16 sets (with the move checked in whole pages, that case fails here), nor
  // under BWMA (whose cores share the input, gemm_share); the exact walk never does.
  if (c.P == 2) CHECK(x.l1_as == std::vector<int64_t>{-1, c.core1_l1_as});
  CHECK(e.l1_as == std::vector<int64_t>(static_cast<size_t>(c.P), -1));
  const double l1 = rel(sum(x.traffic.l1_misses), sum(e.traffic.l1_misses));
  const double llc = rel(sum(x.traffic.llc_misses), sum(e.traffic.llc_misses));
  const double tlb = rel(sum(x.tlb), sum(e.tlb));
  const double tlb_cycles = std::abs(static_cast<double>(sum(x.tlb) - sum(e.tlb))) * tlb_walk_cycles(s) / e.cycles;
  const double dram = rel(x.traffic.dram_bytes(), e.traffic.dram_bytes());
  const double cycles = rel(x.cycles, e.cycles);
  INFO(fmt::format("relative errors: L1 {:.4f} LLC {:.4f} ({} of {}) TLB {:.4f} ({} of {}, {:.5f} of the cycles) DRAM "
                   "bytes {:.4f} cycles {:.5f}; steps {} of {}",
                   l1, llc, sum(x.traffic.llc_misses), sum(e.traffic.llc_misses), tlb, sum(x.tlb), sum(e.tlb), tlb_cycles,
                   dram, cycles, x.steps, e.steps));
  CHECK(l1 < 0.05);
  CHECK(llc < 0.02);
  CHECK((tlb < 0.10 || tlb_cycles < 0.005));
  CHECK(dram < 0.02);
  CHECK(cycles < 0.01);
}

// Element-wise streams of unequal lengths (a run of steps per set of live streams), one read and
// written in place, walked line by line: sampled against exact.
TEST_CASE("in_order_core: the sampled walk gives the exact walk's counts on line streams", "[hwmodel][core][sampling]") {
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  s.cores = GENERATE(1, 2);
  INFO(fmt::format("{} core(s)", s.cores));
  struct Counts {
    int64_t units = 0, steps = 0;
    std::vector<int64_t> tlb;
    Traffic traffic;
  };
  auto walk = [&](CoreWalk how) {
    SystemDesc sys = s;
    sys.core_walk = how;
    CoreSim sim(sys);
    const uint64_t base = uint64_t{1} << 30;
    const std::vector<LineStream> streams{{sim.operand("x"), base, 20 << 20, false},
                                          {sim.operand("y"), base + (32 << 20), (20 << 20) + 1000, true},
                                          {sim.operand("m"), base + (64 << 20), 6 << 20, false}};
    std::vector<CoreShare> shares;
    for (int64_t c = 0; c < sys.cores; ++c) shares.push_back(line_share(streams, 4, sys, c));
    Counts r;
    for (const int64_t n : sim.run(shares)) r.steps += n;
    for (const CoreShare& c : shares) r.units += c.units;
    r.traffic = sim.finish();
    r.tlb = sim.tlb_misses();
    return r;
  };
  const Counts e = walk(CoreWalk::exact), x = walk(CoreWalk::sampled);
  CHECK(x.units == e.units);
  CHECK(x.steps * 4 < e.steps);
  INFO(fmt::format("L1 {} / {}, LLC {} / {}, TLB {} / {}, DRAM bytes {} / {}, row misses {} / {}", sum(x.traffic.l1_misses),
                   sum(e.traffic.l1_misses), sum(x.traffic.llc_misses), sum(e.traffic.llc_misses), sum(x.tlb), sum(e.tlb),
                   x.traffic.dram_bytes(), e.traffic.dram_bytes(), x.traffic.row_misses(), e.traffic.row_misses()));
  CHECK(rel(sum(x.traffic.l1_misses), sum(e.traffic.l1_misses)) < 0.01);
  CHECK(rel(sum(x.traffic.llc_misses), sum(e.traffic.llc_misses)) < 0.01);
  CHECK(rel(sum(x.tlb), sum(e.tlb)) < 0.01);
  CHECK(rel(x.traffic.dram_bytes(), e.traffic.dram_bytes()) < 0.01);
}

// SegKind::repeat (core_walk.h): a tile of the same lines as the tile before it, itself such a
// tile, counted from that tile's counts instead of walked. Against walking every copy: a tile of
// strided rows that overflows some L1 sets (2 ways) and the TLB, after a different tile that
// leaves its own lines behind, repeated 7 times with weights 3 and 0 (a warm-up copy); the L1
// misses, TLB misses and accesses must be the same, weight for weight.
TEST_CASE("in_order_core: a repeated tile counts what walking it again counts", "[hwmodel][core][sampling]") {
  SystemDesc s = load_system(std::string(BERTLAB_SOURCE_DIR) + "/configs/systems/paper-ticsat.json");
  s.cores = 1;
  // One step per row: `rows` rows of 4 bytes at `stride` from `base` (stride 4 KB + 64: every
  // row in its own page, the rows' lines spread over the L1's sets).
  auto tile = [](uint64_t base, int64_t rows, std::vector<std::vector<CoreSeg>>& steps, int op, int64_t weight, SegKind k) {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<CoreSeg> step;
      if (r == 0) step.push_back({op, 0, 0, false, weight, CacheLevels::l1_only, 1, k});
      step.push_back({op, base + static_cast<uint64_t>(r * (4096 + 64)), 4, r % 3 == 0, weight, CacheLevels::l1_only});
      steps.push_back(step);
    }
  };
  const std::vector<int64_t> weights{1, 3, 3, 0, 3, 3, 3};
  auto run = [&](bool repeat) {
    CoreSim sim(s);
    const int op = sim.operand("A");
    std::vector<std::vector<CoreSeg>> steps;
    tile(uint64_t{1} << 32, 300, steps, op, 1, SegKind::tile);  // the tile before: other lines
    for (size_t i = 0; i < weights.size(); ++i) {
      if (repeat && i >= 2) steps.push_back({{op, 0, 0, false, weights[i], CacheLevels::l1_only, 1, SegKind::repeat}});
      else tile(uint64_t{1} << 30, 700, steps, op, weights[i], SegKind::tile);
    }
    size_t k = 0;
    std::vector<CoreShare> shares(1);
    shares[0].steps = [&](std::vector<CoreSeg>& out) {
      if (k >= steps.size()) return false;
      out = steps[k++];
      return true;
    };
    sim.run(shares);
    const Traffic t = sim.finish();
    return std::array<int64_t, 3>{t.l1_misses[0], sim.tlb_misses()[0], t.accesses};
  };
  const auto walked = run(false), repeated = run(true);
  INFO("walked: L1 " << walked[0] << ", TLB " << walked[1] << ", accesses " << walked[2]);
  CHECK(walked[0] > 700);  // the tile misses in the L1 every time it is walked again
  CHECK(walked[1] > 700);
  CHECK(repeated == walked);
}

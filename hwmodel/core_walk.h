#pragma once
// The in-order core model's walk: TiC-SAT's schedules (hwmodel/reference/kernels.h holds the
// same loop nests as code) over operands placed in memory (layout.h's MatrixView), one share
// per core, the cores interleaved step by step into the exact simulator (tracesim.h). Both
// users of the core model walk through here: one encoder-layer op at the reference's
// placement (core_model.cpp, `bertlab_hwref model`) and every node of a graph
// (estimate_core.cpp, `bertlab estimate` on an in_order_core system), so the two give the
// same counts for the same operands.
//
// A share counts the instruction model's events of its core: units, the innermost work items
// the schedule walks (GEMM: words streamed through the array; row ops: elements per pass;
// transposes: words read; element-wise lines: words or bytes), groups, the loop bodies around
// them (GEMM: tiles; row ops: rows; transposes: blocks or tiles), and the array's issues.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hwmodel/layout.h"
#include "hwmodel/system.h"
#include "hwmodel/tracesim.h"
#include "hwmodel/work.h"

namespace bertlab::hw {

// One access of a schedule step: `bytes` at `addr` of operand `op`; write = read-modify-write
// (the kernels add into their outputs and rewrite in-place operands). weight: how many
// accesses of the full schedule it stands for (1, but in a sampled walk's representative
// iterations: a split GEMM walk's L1 pass, a sampled line stream). levels: the caches it goes
// through (a split GEMM walk's two passes, gemm_share; the TLB is looked up unless it is the LLC
// pass's). span (read from a step's first access): the schedule steps the step stands for when
// the cores are interleaved (1; a split walk's LLC pass: the steps of the piece of a tile it
// touches at once).
// kind: an access, or a mark of a split walk's L1 pass (it touches nothing): `tile`, a tile's
// first step (CoreSim counts the tile's L1 misses, TLB misses and accesses from there); `repeat`,
// a tile of the same lines, in the same order, as the tile before it, which was itself one: it
// would meet the L1 and TLB states that tile left and leave them so (LRU: a sequence walked
// twice in a row leaves the state it left the first time), so CoreSim counts that tile's counts
// again, with this mark's weight, instead of walking it.
enum class SegKind : uint8_t { access, tile, repeat };
struct CoreSeg {
  int op;
  uint64_t addr;
  int64_t bytes;
  bool write;
  int64_t weight = 1;
  CacheLevels levels = CacheLevels::both;
  int32_t span = 1;
  SegKind kind = SegKind::access;
};
// A core's schedule: each call appends one step's accesses (a weight-tile row, a streamed
// row with the output words it completes, a row pass, a line); false when it is done.
using CoreSteps = std::function<bool(std::vector<CoreSeg>&)>;

struct CoreShare {
  int64_t units = 0, groups = 0, issues = 0;
  CoreSteps steps;
  // A split GEMM walk's core whose tiles are those of core `l1_as` moved by whole L1 and TLB set
  // spans (gemm_share): its L1 and TLB meet the same sequence of sets, so its L1
  // pass is not walked and CoreSim counts core l1_as's L1 misses, accesses and page walks of
  // the run for it. -1: it walks its own.
  int64_t l1_as = -1;
};

// TiC-SAT's GEMM schedules, core `core` of s.cores. BWMA: per product, the core's contiguous
// range of output panels; per panel, per k-tile: the S x S weight tile, the input panel row by
// row, the output panel. RWMA: sequence blocks of s.rwma_block_rows rows, up to 512 rows of
// blocks per L2 group split over the cores; K in chunks of 256, then N chunks of 256, the core's
// blocks, then L1 groups of 64 K-rows x 32 N-columns, tile by tile. Per tile: S weight rows, the
// rows streamed S x elem / bytes_per_issue words each, 2S - 1 rows of fill and drain, and each
// output word added into memory as it leaves the array. s.core_walk exact: every tile through
// both cache levels; sampled (and the GEMM large enough): the split walk (core_walk_gemm.cpp), an LLC
// pass over every tile's lines, then representative blocks of tiles through the L1s and TLBs,
// weighted by the tiles they stand for. Units, groups and issues count every tile either way.
// w.k, w.n: multiples of w.S. a, b, y: the operand ids of the simulator.
CoreShare gemm_share(const GemmWork& w, const SystemDesc& s, int64_t core, int a, int b, int y);

// A transpose of src (rows x cols) into dst (cols x rows), as TiC-SAT's K transpose: row-major
// views in blocks of 4 x 4 bytes (4 words read, 4 written per block), the blocks' rows split
// over the cores; S x S-panel views tile by tile (a contiguous S x S tile read, written whole
// into dst's tile), the tile rows split over the cores. Pairs one after another (heads).
struct TransposePair {
  MatrixView src, dst;
};
CoreShare transpose_share(const std::vector<TransposePair>& pairs, int64_t S, int64_t P, int64_t core, int src, int dst);

// A row op over matrices of `rows` rows of `len` elements: per matrix, per row of the core's
// chunk, `passes` passes over the row. inputs[0] is the row the op works on; further inputs
// are read on every pass. every_pass_writes (softmax: exp and sum, then divide): the output
// row is written on every pass (the first pass reads inputs[0] and writes the output, or
// rewrites it in place); otherwise (layernorm: sum, variance, normalise) only the last pass
// writes. Rows of a panel view (BWMA) are S-element pieces in each panel; the core chunks
// keep rows that share a line on one core.
struct RowMats {
  std::vector<MatrixView> inputs;
  MatrixView output;
};
CoreShare row_share(const std::vector<RowMats>& mats, int64_t rows, int64_t len, int passes, bool every_pass_writes,
                    int64_t line, int64_t P, int64_t core, const std::vector<int>& input_ids, int output_id);

// Element-wise kernels in storage order (residual add, GELU's lookup, every stream of a
// graph): line by line, each stream's lines split over the cores in contiguous chunks; a
// step reads (or read-modify-writes) one line of every stream. units: the bytes of the first
// stream on this core / unit_bytes (residual add: 4-byte words; GELU: bytes). One group.
struct LineStream {
  int op;
  uint64_t base;
  int64_t bytes;
  bool write;
};
// Lines of s.l1.line_bytes over s.cores cores; s.core_walk: every line, or sampled as a loop of
// lines (core_walk.cpp loop_visits: the first two, four strata, the last).
CoreShare line_share(const std::vector<LineStream>& streams, int64_t unit_bytes, const SystemDesc& s, int64_t core);

// The compiled kernel's own stack and scratch lines (spilled locals, loop counters, the array
// instruction stand-in's state): one private line per entry, in L1 set `l1_set`, warm and
// dirty at the start and touched (read-modify-write) `per_step` times per schedule step on
// average (core_model.h says how the touches are spread).
struct StackLine {
  int64_t l1_set = 0;
  double per_step = 1;
};
struct CoreStack {
  std::vector<StackLine> lines;
};

// A data TLB (TlbDesc: entries > 0): LRU over page numbers in its sets, O(1) per lookup: the
// entries in flat arrays, each set's entries on an index-linked ring in recency order, and an
// open-addressed table from page to entry (no allocation after construction).
class PageLru {
 public:
  explicit PageLru(const TlbDesc& t);
  bool access(uint64_t page);  // true on a hit; a miss installs the page, evicting the set's LRU

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr int32_t kNone = -1;
  int32_t find(uint64_t page) const;  // the page's entry, or kNone
  void unlink(int32_t e);
  void push_front(int64_t set, int32_t e);
  void table_insert(uint64_t page, int32_t e);
  void table_erase(uint64_t page);
  size_t slot_of(uint64_t page) const { return static_cast<size_t>((page * 0x9E3779B97F4A7C15ull) >> shift_); }
  int64_t sets_, ways_;
  uint64_t last_ = kEmpty;  // the most recent page: a hit that changes no order
  std::vector<uint64_t> page_;          // per entry (set s holds entries s * ways .. s * ways + ways - 1)
  std::vector<int32_t> prev_, next_;    // per entry: the ring of its set, most recent at head_
  std::vector<int32_t> head_, used_;    // per set: most recent entry (kNone: empty), entries in use
  std::vector<uint64_t> key_;           // open-addressed table: page (kEmpty: free) ...
  std::vector<int32_t> val_;            // ... and its entry
  int shift_ = 64;
};

// The exact simulator driven by shares (core_sim.cpp): run() walks one kernel's shares (share c
// on core c), one step of each core per round, touching the stack lines at their rates.
class CoreSim {
 public:
  CoreSim(const SystemDesc& s, const CoreStack& stack = {});
  int operand(const std::string& name) { return sim_.operand(name); }
  // Returns the steps each core walked.
  std::vector<int64_t> run(std::vector<CoreShare>& shares);
  Traffic finish() { return sim_.finish(); }
  // Per core: data TLB misses (page walks) of the operand accesses so far (sys.tlb; none when
  // it has no entries).
  const std::vector<int64_t>& tlb_misses() const { return tlb_misses_; }

 private:
  void touch_stack(int64_t core, size_t i);
  void translate(int64_t core, uint64_t addr, int64_t bytes, int64_t weight);
  void mark(int64_t core, const CoreSeg& m);
  const SystemDesc& sys_;
  CoreStack stack_;
  TraceSim sim_;
  std::vector<PageLru> tlb_;  // per core
  std::vector<int64_t> tlb_misses_;
  // Per core, unweighted: its TLB misses so far; its L1 counts and TLB misses at the start of the
  // last SegKind::tile, and of that tile once a repeat closed it (mark). (run() also keeps each
  // core's weighted counts at its start in a Counts, for CoreShare::l1_as.)
  struct Counts {
    TraceSim::L1Counts l1;
    int64_t tlb = 0;
  };
  std::vector<int64_t> tlb_unweighted_;
  std::vector<Counts> tile_start_, tile_;
  std::vector<bool> tile_open_;
  int stack_id_ = -1;
  std::vector<double> due_;  // per core and stack line: touches owed
};

}  // namespace bertlab::hw

#pragma once
// The system an estimate is made for: cores, each with an S x S systolic array fed through
// the core (the tightly coupled accelerator of the arrangement paper), private L1 caches, a
// shared last-level cache and DRAM. Or a plain CPU described by measured peaks ("cpu" kind),
// built from the machine.json that `bertlab calibrate` writes. Schema: docs/hwmodel.md.
#include <bit>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "runtime/machine.h"

namespace bertlab::hw {

// The systolic array's dataflow: weight, output or input stationary. Columns: the enum; its name
// in system files (to_string); SCALE-Sim's long name, which system files may give instead.
#define BERTLAB_DATAFLOWS(X) \
  X(ws, "ws", "weight_stationary") X(os, "os", "output_stationary") X(is, "is", "input_stationary")
BERTLAB_ENUM(Dataflow, uint8_t, BERTLAB_DATAFLOWS)
// What a description models: an accelerator (cores with systolic arrays, caches, DRAM) or a
// CPU described by measured peaks.
#define BERTLAB_SYSTEM_KINDS(X) X(accelerator, "accelerator") X(cpu, "cpu")
BERTLAB_ENUM(SystemKind, uint8_t, BERTLAB_SYSTEM_KINDS)
// How a node's time is modelled:
// - in_order_core: the paper's tightly coupled system, an in-order core that executes the
//   kernel's instructions and issues the array's (core_model.h, core_walk.h): instructions,
//   array issues, L1 and LLC misses of TiC-SAT's schedules, walked through the exact simulator;
// - loosely_coupled: an array fed from memory at its issue rate, the core not modelled (the
//   array's issues and the closed-form traffic of analytic.h);
// - scalesim: SCALE-Sim's closed forms (compute.h) and, optionally, its memory system.
#define BERTLAB_COMPUTE_MODELS(X) X(in_order_core, "in_order_core") X(loosely_coupled, "loosely_coupled") X(scalesim, "scalesim")
BERTLAB_ENUM(ComputeModel, uint8_t, BERTLAB_COMPUTE_MODELS)
// The instruction basis of the in_order_core model (core_model.h builtin_coefficients): the
// kernels' instructions per unit and per group as compiled for this ISA.
// aarch64: TiC-SAT's kernels at its own flags (the paper system's, docs/hwmodel-aarch64.md);
// x86_64: bertlab's reference kernels, the ones measured under valgrind (docs/hwmodel.md).
#define BERTLAB_CORE_ISAS(X) X(aarch64, "aarch64") X(x86_64, "x86_64")
BERTLAB_ENUM(CoreIsa, uint8_t, BERTLAB_CORE_ISAS)
// How the attention's Q, K and V projections run on in_order_core systems: fused, one GEMM
// x(L,H) W(H,3H) into qkv (L,3H), heads read in place; per_head, as TiC-SAT runs them: per head,
// three GEMMs x(L,H) W(H,d) into buffers of their own (L,d), each weight and buffer allocated
// alone, the heads' context written head after head and, under RWMA, copied into the rows of
// the attention output (TiC-SAT's multihead_transpose).
#define BERTLAB_QKV_SCHEDULES(X) X(fused, "fused") X(per_head, "per_head")
BERTLAB_ENUM(QkvSchedule, uint8_t, BERTLAB_QKV_SCHEDULES)
// How the in_order_core model walks a GEMM's schedule through the cache simulator (core_walk.h
// gemm_share): exact, every access of every tile; sampled, the split walk: every tile's lines
// through the LLC, representative blocks of tiles through the L1s and TLBs, their counts
// weighted by the tiles they stand for (instructions and array issues stay exact); element-wise
// line streams sample their loop of lines. `bertlab_hwref model` always walks exactly.
#define BERTLAB_CORE_WALKS(X) X(exact, "exact") X(sampled, "sampled")
BERTLAB_ENUM(CoreWalk, uint8_t, BERTLAB_CORE_WALKS)
// The cpu kind's node model: calibrated (estimate.cpp cpu_node) or the plain roofline.
#define BERTLAB_CPU_MODELS(X) X(calibrated, "calibrated") X(roofline, "roofline")
BERTLAB_ENUM(CpuModel, uint8_t, BERTLAB_CPU_MODELS)

// Largest core count of an accelerator description: the model keeps per-core counts and
// the paper's systems have 1-8 cores; beyond 64 the shared-LLC, shared-DRAM model (one
// bank per stream, no interconnect) does not describe a real system.
inline constexpr int64_t kMaxAcceleratorCores = 64;
// Largest thread count of a cpu description (machine.json threads).
inline constexpr int64_t kMaxCpuCores = 1024;

struct CacheDesc {
  int64_t size_bytes = 0;
  int64_t ways = 1;
  int64_t line_bytes = 64;
  double hit_cycles = 0;     // latency of a hit at this level, core cycles
  bool hashed_index = false; // set index XOR-folds upper line bits (as LLC slice hashes do)
  // A hashed index resolved per set whatever its size (setload.h, kMaxResolvedHashedSets): exact
  // at every associativity, at the modulo path's cost. Modulo indexes are always resolved.
  bool exact_sets = false;
  // The miss path (latency.h; gem5's classic cache parameters; 0: not charged), after the
  // fields that aggregate initialisers set. tag_cycles (L1 only): the tag lookup that finds a
  // miss, after which the request leaves. response_cycles: the fill's latency (L1: before the
  // waiting load completes; LLC: on the return path of its own misses).
  double tag_cycles = 0;
  double response_cycles = 0;
  int64_t lines() const { return size_bytes / line_bytes; }
  int64_t sets() const { return lines() / ways; }
  // The set that holds line number `line` (byte address / line_bytes). Modulo index: the
  // low bits. Hashed index (needs a power-of-two number of sets): the XOR of all the
  // set-index-wide bit fields of the line number (an XOR-fold), the shape of the XOR hashes
  // that LLCs use to spread strided data (e.g. Intel's slice/set hashing). It is a bijection
  // on every aligned block of `sets` lines (the upper bits are constant there), so
  // contiguous data still fills every set evenly; the cache stays `ways`-way set
  // associative. Used by the exact simulator (tracesim.cpp) and the analytic model
  // (setload.cpp, analytic*.cpp) alike, through SetIndex in hot loops.
  int64_t set_of(int64_t line) const;
};

// CacheDesc::set_of with the set count and the index width computed once.
struct SetIndex {
  explicit SetIndex(const CacheDesc& c)
      : sets(c.sets()),
        bits(sets > 0 ? std::countr_zero(static_cast<uint64_t>(sets)) : 0),
        hashed(c.hashed_index && sets > 1),
        modulo_mask(!hashed && sets > 0 && std::has_single_bit(static_cast<uint64_t>(sets)) ? sets - 1 : -1) {}
  int64_t operator()(int64_t line) const {
    if (modulo_mask >= 0) return line & modulo_mask;  // the common case first: one test
    if (!hashed) return line % sets;                  // lines are >= 0
    uint64_t h = 0;  // XOR-fold (CacheDesc::set_of)
    for (uint64_t x = static_cast<uint64_t>(line); x != 0; x >>= bits) h ^= x;
    return static_cast<int64_t>(h & static_cast<uint64_t>(sets - 1));
  }
  int64_t sets;
  int bits;
  bool hashed;
  // sets - 1 for a modulo index of a power-of-two number of sets (the modulo as a mask), else -1
  int64_t modulo_mask;
};

inline int64_t CacheDesc::set_of(int64_t line) const { return SetIndex(*this)(line); }

// A per-core data TLB (in_order_core systems): `entries` translations of `page_bytes` pages,
// `ways`-way set associative (0: fully associative), LRU. A miss walks `walk_levels` levels of
// the page table, each one access served by the LLC (gem5-X's table walker has no walk cache
// and sits below the L1): walk_levels LLC accesses per miss (latency.h). entries 0: no TLB modelled.
struct TlbDesc {
  int64_t entries = 0;
  int64_t ways = 0;
  int64_t page_bytes = 4096;
  int64_t walk_levels = 4;
  // Its sets (a power of two): one when fully associative; each set is `ways` entries.
  int64_t sets() const { return ways == 0 ? 1 : entries / ways; }
};

// The bus between the L1s and the LLC (gem5's L2XBar): latency of a request (frontend +
// forward) and of a response, core cycles (latency.h).
struct BusDesc {
  double forward_cycles = 0;
  double response_cycles = 0;
};

struct DramDesc {
  int64_t channels = 1;
  double peak_gbps = 0;      // GB/s over all channels
  int64_t burst_bytes = 64;  // bytes per burst (BL8 x 64 bit = 64)
  int64_t row_bytes = 8192;  // row buffer (page) per bank
  int64_t banks = 16;        // over all ranks and channels
  double row_hit_ns = 0;     // latency of a read hitting the open row
  double row_miss_ns = 0;    // latency of precharge + activate + read
};

// SCALE-Sim v2's memory system between the array and DRAM (its InterfaceBandwidth USER mode):
// double-buffered read SRAMs for the two operands, a write SRAM for the outputs, and one DRAM
// interface of `bandwidth_words_per_cycle` words per cycle per buffer. One word is one byte
// (SCALE-Sim's word_size). hwmodel/scalesim_memory.h simulates it.
struct ScaleSimMemoryDesc {
  int64_t ifmap_sram_kb = 64, filter_sram_kb = 64, ofmap_sram_kb = 64;
  int64_t bandwidth_words_per_cycle = 10;
  // Count each positive read lateness twice, as SCALE-Sim did before commit 22f88b17 (its CI
  // golden at 9b3f10a); false: once, as SCALE-Sim does since.
  bool stall_double_count = false;
};

struct ArrayDesc {
  int64_t kernel = 8;               // S: the array is S x S
  Dataflow dataflow = Dataflow::ws;
  ComputeModel compute_model = ComputeModel::loosely_coupled;
  int64_t bytes_per_issue = 4;      // bytes moved into/out of the array per issued instruction
  double cycles_per_issue = 1;      // core cycles per issued array instruction
  double output_cycles_per_issue = 1;  // extra cycles to accumulate one popped output word
  // SCALE-Sim mode only: its memory system (stall cycles); absent: no stalls, like SCALE-Sim's
  // CALC bandwidth.
  std::optional<ScaleSimMemoryDesc> scalesim_memory;
};

struct SystemDesc {
  std::string name;
  SystemKind kind = SystemKind::accelerator;
  int64_t cores = 1;
  double clock_ghz = 1;
  int64_t elem_bytes = 1;            // element size of the accelerator's data (int8: 1)
  bool pad_to_kernel = true;         // pad K and N up to multiples of S; false: they must divide
  int64_t rwma_block_rows = 128;     // RWMA sequence block (rows per block), split across cores
  // in_order_core: bytes from a page (a DRAM row in the estimate) to each operand's first
  // element. TiC-SAT's operands are new[] buffers, 16 bytes into their pages (glibc's chunk
  // header of an mmap'd allocation); 0: every operand starts a page.
  int64_t operand_offset_bytes = 0;
  QkvSchedule qkv = QkvSchedule::fused;  // in_order_core
  double core_flops_per_cycle = 1;   // scalar work of non-GEMM ops on the core
  double overlap = 0;                // fraction of the smaller of compute/memory time hidden
  double memory_parallelism = 1;     // outstanding misses per core (1: blocking in-order core)
  CoreIsa core_isa = CoreIsa::aarch64;  // in_order_core: whose instruction counts
  double issue_width = 1;            // in_order_core: instructions issued per cycle (gem5-X's MinorCPU: 2)
  ArrayDesc array;
  CoreWalk core_walk = CoreWalk::exact;  // in_order_core: how GEMM schedules are walked
  CacheDesc l1;                      // per core
  CacheDesc llc;                     // shared
  BusDesc llc_bus;                   // L1s to LLC
  TlbDesc tlb;                       // per core (in_order_core)
  DramDesc dram;
  // cpu kind: measured GEMM peak per precision (GFLOP/s, all cores) and memory bandwidth.
  nlohmann::json gemm_peak_gflops = nlohmann::json::object();
  Precision precision = Precision::fp32;  // the "roofline" model's precision for every GEMM
  // cpu kind, "calibrated" model (estimate.cpp cpu_node); from machine.json when it has them:
  CpuModel cpu_model = CpuModel::calibrated;  // or roofline (one peak, DRAM bandwidth)
  std::vector<GemmCalibration> gemm_rates;  // measured BERT-shaped GEMMs (empty: peaks only)
  double resident_gbps = 0;            // cache-resident triad, GB/s (0: unmeasured, use DRAM)
  double parallel_region_seconds = 0;  // fixed cost of one OpenMP parallel region (0: unmeasured)
  // Rates of the element-wise kernels that are vector compute (ops::ElementwiseKernel, in its
  // order: erf GELU, its backward, dropout), 1e9 elements per second (0: unmeasured).
  ops::ElementwiseRates elementwise_gelem_per_s{};

  double dram_bytes_per_cycle() const { return dram.peak_gbps / clock_ghz; }
  // An accelerator of tightly coupled in-order cores (compute_model in_order_core): the core
  // model walks TiC-SAT's schedules and prices TiC-SAT's kernels (estimate_core.cpp).
  bool in_order_cores() const {
    return kind == SystemKind::accelerator && array.compute_model == ComputeModel::in_order_core;
  }
};

// Parses and validates a system description (format "bertlab-system", version 1) or a
// machine.json (format "bertlab-machine"); `origin` names the file in error messages.
SystemDesc system_from_json(const nlohmann::json& j, const std::string& origin);
SystemDesc load_system(const std::string& path);
nlohmann::json system_to_json(const SystemDesc& s);
// Throws Error naming the field when a value is missing or impossible.
void validate(const SystemDesc& s, const std::string& origin);

}  // namespace bertlab::hw

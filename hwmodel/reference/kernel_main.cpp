// bertlab_hwref_kernel: one core's share of one encoder-layer op on the reference kernels
// (kernels.h), to be run under valgrind by scripts/hwmodel_reference.sh:
//   bertlab_hwref_kernel OP rwma|bwma SEQ S CORES CORE [dry]
// `dry` runs everything but the kernel call between the markers: cachegrind counts per
// function over the whole run, so the script subtracts the dry run's counts (the warm-up
// call, the operand table built in main) from the full run's.
// Built for the generic x86-64 ISA (valgrind does not decode AVX-512) and without
// command-line library, so that nothing but the kernel runs between the two marker stores.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "hwmodel/reference/kernels.h"

namespace {

using namespace bertlab;
using namespace bertlab::hw;

// The lackey replay counts what lies between the two stores to g_marker, and simulates the
// caches from the store to g_warm on (lackey_replay.h).
volatile uint64_t g_marker = 0;
volatile uint64_t g_warm = 0;

// Reads a buffer larger than the LLC so that the kernel starts with cold caches.
[[gnu::noinline]] uint64_t flush_caches() {
  static std::vector<uint64_t> junk(size_t{1} << 20, 1);  // 8 MB
  uint64_t s = 0;
  for (size_t i = 0; i < junk.size(); i += 8) s += junk[i];
  return s;
}

// A core count so large that the last core's share of every op is empty.
constexpr int64_t kEmptyShare = int64_t{1} << 30;

// Runs the kernel on a stack realigned to 16 KB (a multiple of the paper L1's bytes per way,
// 256 sets x 64 B), so that its frames fall in the same L1 sets in every run, whatever the
// sizes of the arguments and the environment above them: the sets of the stack lines
// measured from one lackey trace (scripts/hwmodel_reference.sh, the core model's stack
// stream, core_model.h) are those of every cachegrind and lackey run of the same binary.
[[gnu::noinline]] void run_aligned(LayerOp op, Arrangement a, const LayerDims& d, int64_t S, uint8_t* base,
                                   int64_t cores, int64_t core) {
  alignas(16384) volatile uint8_t anchor = 0;
  (void)anchor;
  hwref::run_op(hwref::ArrayKind::barrier, op, a, d, S, base, cores, core);
}

int64_t number(const char* arg, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(arg, &end, 10);
  check(end && *end == 0 && v >= 0, "{}: expected a non-negative integer, got '{}'", what, arg);
  return v;
}

int run(int argc, char** argv) {
  check(argc == 7 || (argc == 8 && std::string(argv[7]) == "dry"),
        "usage: bertlab_hwref_kernel OP rwma|bwma SEQ S CORES CORE [dry]");
  const bool dry = argc == 8;
  const LayerOp op = layer_op_from_string(argv[1]);
  const std::string arr = argv[2];
  check(arr == "rwma" || arr == "bwma", "arrangement: expected rwma or bwma, got '{}'", arr);
  const Arrangement a = arr == "rwma" ? Arrangement::rwma : Arrangement::bwma;
  LayerDims d;
  d.seq = number(argv[3], "SEQ");
  const int64_t S = number(argv[4], "S"), cores = number(argv[5], "CORES"), core = number(argv[6], "CORE");
  check(S == 4 || S == 8 || S == 16 || S == 32, "S: expected 4, 8, 16 or 32, got {}", S);
  check(d.seq % 32 == 0 && d.seq > 0, "SEQ: expected a positive multiple of 32, got {}", d.seq);
  check(cores >= 1 && core < cores, "CORE {} outside 0..{}", core, cores - 1);
  const auto ops = op_operands(op, d);
  const int64_t bytes = region_bytes(ops);
  // 2 MB aligned, like kRegionBase in the model, so that cache set indices agree.
  const size_t align = size_t{2} << 20;
  void* raw = mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(raw != MAP_FAILED, "cannot map {} bytes", bytes + align);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + align - 1) / align * align);
  // The operands' bytes, written eight at a time (fewer accesses for lackey to trace).
  for (int64_t i = 0; i < bytes; i += 8) {
    uint64_t w = 0;
    for (int64_t b = 0; b < 8 && i + b < bytes; ++b)
      w |= static_cast<uint64_t>(static_cast<uint8_t>(((i + b) * 2654435761u) >> 24)) << (8 * b);
    std::memcpy(base + i, &w, static_cast<size_t>(std::min<int64_t>(8, bytes - i)));
  }
  std::fprintf(stderr, "#hwref region=0x%llx bytes=%lld marker=0x%llx warm=0x%llx\n",
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(base)), static_cast<long long>(bytes),
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&g_marker)),
               static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(&g_warm)));
  uint64_t sum = flush_caches();
  // Warm-up: the same call with an empty share (one core of very many) touches what the
  // kernel touches besides its operands (its stack frames, the heap blocks of the operand
  // and GEMM tables, the lookup tables) and none of the operands, so that cachegrind and the
  // replay count, like the model, the misses of the kernel's data and not the cold lines of
  // one process.
  g_warm = 1;
  run_aligned(op, a, d, S, base, kEmptyShare, kEmptyShare - 1);
  sum += *static_cast<const volatile uint8_t*>(&hwref::kExpLookup[0]);  // softmax's table
  g_marker = 1;
  if (!dry) run_aligned(op, a, d, S, base, cores, core);
  g_marker = 2;
  for (int64_t i = 0; i < bytes; i += 64) sum += base[i];
  std::printf("checksum %llu\n", static_cast<unsigned long long>(sum));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bertlab_hwref_kernel: %s\n", e.what());
    return 1;
  }
}

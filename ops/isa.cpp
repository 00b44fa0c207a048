#include "ops/isa.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <unistd.h>

#include "base/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace bertlab::ops {

namespace {

// What the CPU and OS offer, from CPUID and XGETBV (the OS must save a register file's state
// for its instructions to be usable).
struct CpuFeatures {
  bool sse41 = false, avx = false, avx2 = false, avx_vnni = false, avx512_core = false, avx512_vnni = false,
       avx512_bf16 = false, amx = false;
};

CpuFeatures read_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), sse41 = c & (1u << 19), movbe = c & (1u << 22), osxsave = c & (1u << 27),
             avx = c & (1u << 28), f16c = c & (1u << 29);
  f.sse41 = sse41;
  if (!osxsave) return f;
  unsigned xcr_lo, xcr_hi;
  __asm__("xgetbv" : "=a"(xcr_lo), "=d"(xcr_hi) : "c"(0));
  const bool ymm_state = (xcr_lo & 0x6u) == 0x6u, zmm_state = (xcr_lo & 0xE0u) == 0xE0u,
             tile_state = (xcr_lo & 0x60000u) == 0x60000u;
  f.avx = avx && ymm_state;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned b7 = b, c7 = c, d7 = d;
  __cpuid_count(7, 1, a, b, c, d);
  const unsigned a71 = a;
  bool lzcnt = false;
  if (__get_cpuid(0x80000001u, &a, &b, &c, &d)) lzcnt = c & (1u << 5);
  // x86-64-v3, the portable build's baseline: AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE.
  f.avx2 = f.avx && (b7 & (1u << 5)) && (b7 & (1u << 3)) && (b7 & (1u << 8)) && f16c && fma && lzcnt && movbe;
  f.avx_vnni = f.avx2 && (a71 & (1u << 4));
  // oneDNN's avx512_core: F, DQ, BW and VL.
  f.avx512_core = f.avx2 && zmm_state && (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) &&
                  (b7 & (1u << 31));
  f.avx512_vnni = f.avx512_core && (c7 & (1u << 11));
  f.avx512_bf16 = f.avx512_vnni && (a71 & (1u << 5));
  // AMX tiles with bf16 and int8 (oneDNN's avx512_core_amx also asks the kernel for the tile
  // state, arch_prctl, when it first runs an AMX kernel).
  f.amx = f.avx512_bf16 && tile_state && (d7 & (1u << 24)) && (d7 & (1u << 22)) && (d7 & (1u << 25));
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_cpu_features();
  return f;
}

// oneDNN 2.6's ONEDNN_MAX_CPU_ISA values that bertlab accepts, with the level each caps
// bertlab's own kernels at and whether this CPU has it.
struct CapName {
  const char* name;
  Isa level;
  bool CpuFeatures::*needs;
};
constexpr CapName kCapNames[] = {
    {"SSE41", Isa::portable, &CpuFeatures::sse41},
    {"AVX", Isa::portable, &CpuFeatures::avx},
    {"AVX2", Isa::avx2, &CpuFeatures::avx2},
    {"AVX2_VNNI", Isa::avx2, &CpuFeatures::avx_vnni},
    {"AVX512_CORE", Isa::avx512_core, &CpuFeatures::avx512_core},
    {"AVX512_CORE_VNNI", Isa::avx512_core, &CpuFeatures::avx512_vnni},
    {"AVX512_CORE_BF16", Isa::avx512_core_bf16, &CpuFeatures::avx512_bf16},
    {"AVX512_CORE_AMX", Isa::avx512_core_amx, &CpuFeatures::amx},
};

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return char(std::toupper(ch)); });
  return s;
}

}  // namespace

Isa cpu_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.amx) return Isa::avx512_core_amx;
  if (f.avx512_bf16) return Isa::avx512_core_bf16;
  if (f.avx512_core) return Isa::avx512_core;
  if (f.avx2) return Isa::avx2;
  return Isa::portable;
}

const char* isa_cap_variable() {
  // oneDNN reads ONEDNN_ first, then the DNNL_ name.
  if (std::getenv("ONEDNN_MAX_CPU_ISA") == nullptr && std::getenv("DNNL_MAX_CPU_ISA") != nullptr)
    return "DNNL_MAX_CPU_ISA";
  return "ONEDNN_MAX_CPU_ISA";
}

std::string isa_cap_value() {
  const char* v = std::getenv(isa_cap_variable());
  return v ? v : "";
}

std::vector<std::string> isa_cap_values() {
  std::vector<std::string> names;
  for (const auto& c : kCapNames)
    if (cpu_features().*c.needs) names.emplace_back(c.name);
  names.emplace_back("ALL");
  return names;
}

// The first (lowest) cap name of the level.
const char* isa_cap_name(Isa isa) {
  const auto it = std::find_if(std::begin(kCapNames), std::end(kCapNames), [&](const CapName& c) { return c.level == isa; });
  check(it != std::end(kCapNames), "no ONEDNN_MAX_CPU_ISA name for ISA level {}", to_string(isa));
  return it->name;
}

Isa active_isa() {
  const std::string value = upper(isa_cap_value());
  if (value.empty() || value == "ALL") return cpu_isa();
  const auto it = std::find_if(std::begin(kCapNames), std::end(kCapNames),
                               [&](const CapName& c) { return value == c.name; });
  check(it != std::end(kCapNames), "{}={}: unknown ISA level; this CPU accepts {}", isa_cap_variable(),
        isa_cap_value(), fmt::join(isa_cap_values(), ", "));
  check(cpu_features().*it->needs, "{}={}: this CPU does not have that level; it accepts {}", isa_cap_variable(),
        isa_cap_value(), fmt::join(isa_cap_values(), ", "));
  return it->level;
}

std::string bf16_unavailable_reason() {
  const Isa active = active_isa();
  if (active >= Isa::avx512_core_bf16) return "";
  if (cpu_isa() >= Isa::avx512_core_bf16)
    return fmt::format("{}={} caps this CPU below avx512_core_bf16, the least that multiplies bf16 natively",
                       isa_cap_variable(), isa_cap_value());
#if defined(__x86_64__)
  return fmt::format("this CPU has no native bf16 matmul (its highest level is {}; bf16 products need "
                     "avx512_bf16 or AMX)",
                     to_string(cpu_isa()));
#else
  return "this CPU has no native bf16 matmul that bertlab uses (bf16 products need an x86-64 CPU with "
         "avx512_bf16 or AMX)";
#endif
}

}  // namespace bertlab::ops

#if defined(__x86_64__) && defined(__AVX2__) && !defined(__AVX512F__)
// A build for the x86-64-v3 baseline (BERTLAB_NATIVE=OFF) started on an older CPU: one line and
// exit 1 before any constructor runs code that needs AVX2, instead of an illegal instruction.
// Compiled for the plain x86-64 baseline, with CPUID by hand (a library call could use AVX2).
namespace {
__attribute__((constructor(101), target("arch=x86-64"))) void refuse_cpu_below_baseline() {
  // No helper functions or lambdas: they would be compiled for the build's baseline.
  unsigned r0[4], r1[4], r7[4] = {0, 0, 0, 0};
#define BERTLAB_CPUID(leaf, r) \
  __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(0u))
  BERTLAB_CPUID(0u, r0);
  BERTLAB_CPUID(1u, r1);
  if (r0[0] >= 7) BERTLAB_CPUID(7u, r7);
#undef BERTLAB_CPUID
  unsigned xcr = 0;
  if (r1[2] & (1u << 27)) {
    unsigned hi;
    __asm__ volatile("xgetbv" : "=a"(xcr), "=d"(hi) : "c"(0));
  }
  const bool ok = (r1[2] & (1u << 12)) && (r1[2] & (1u << 28)) && (r1[2] & (1u << 29)) && (xcr & 0x6u) == 0x6u &&
                  (r7[1] & (1u << 5)) && (r7[1] & (1u << 3)) && (r7[1] & (1u << 8));
  if (ok) return;
  static const char msg[] =
      "bertlab: error: this CPU lacks AVX2 and FMA (x86-64-v3), the least this portable build runs on; "
      "build on this machine with -DBERTLAB_NATIVE=ON\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(1);
}
}  // namespace
#endif

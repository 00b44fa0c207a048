#pragma once
// The instruction-set levels that bertlab's own kernels and oneDNN dispatch on, and the one
// setting that caps both: ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA), which oneDNN
// reads itself and bertlab reads the same way. A cap lets any machine run the paths of a lower
// one: tests run the ISA-sensitive cases at every level the machine has (scripts/test.sh).
#include <array>
#include <string>
#include <vector>

#include "base/enum_table.h"

namespace bertlab::ops {

// Ordered: each level has everything of the ones before it. `portable` is the plain C++ path
// (what arm64 and any x86-64 CPU capped below AVX2 run).
#define BERTLAB_ISAS(X)                                                                            \
  X(portable, "portable") X(avx2, "avx2") X(avx512_core, "avx512_core") X(avx512_core_bf16, "avx512_core_bf16") \
  X(avx512_core_amx, "avx512_core_amx")
BERTLAB_ENUM(Isa, uint8_t, BERTLAB_ISAS)
#define BERTLAB_ISA_VALUE_(id, ...) Isa::id,
inline constexpr std::array kIsas{BERTLAB_ISAS(BERTLAB_ISA_VALUE_)};
#undef BERTLAB_ISA_VALUE_

// The highest level this CPU and its OS support, cap or no cap.
Isa cpu_isa();
// The level in force: cpu_isa() capped by ONEDNN_MAX_CPU_ISA. Throws Error, naming the variable
// and the values this CPU accepts, for an unknown name or a level this CPU does not have.
Isa active_isa();
// The environment variable that caps the level, and its value ("" when unset).
const char* isa_cap_variable();
std::string isa_cap_value();
// The ONEDNN_MAX_CPU_ISA values this CPU accepts, lowest first (ALL last).
std::vector<std::string> isa_cap_values();
// The ONEDNN_MAX_CPU_ISA value that caps at `isa` (portable: SSE41 on x86-64).
const char* isa_cap_name(Isa isa);

// Why bf16 GEMMs cannot run here, or "" when they can: the CPU feature that is missing, or the
// cap that hides it. Every message that refuses bf16 products quotes it.
std::string bf16_unavailable_reason();

}  // namespace bertlab::ops

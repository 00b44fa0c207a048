#pragma once
// GEMM input precision: parsed once where it enters (command-line flags, graph attributes,
// machine.json, hwmodel system files) and passed as this type everywhere else.
#include <cstdint>
#include <string>

namespace bertlab {

// fp32: GEMMs in f32. bf16: GEMMs on bf16 copies of their f32 inputs, accumulating and
// writing in f32 (mixed precision as in PyTorch's autocast).
enum class Precision : uint8_t { fp32, bf16 };

// "fp32" | "bf16": the spelling of flags, graph attributes and run metadata.
const char* to_string(Precision p);
// "f32" | "bf16": the spelling of machine.json and hwmodel system files (gemm_peak_gflops keys).
const char* file_key(Precision p);
// Accepts either spelling ("fp32" or "f32", "bf16"); throws Error naming `what` otherwise.
Precision precision_from_string(const std::string& s, const std::string& what = "precision");

}  // namespace bertlab

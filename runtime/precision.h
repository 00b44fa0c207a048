#pragma once
// GEMM input precision: parsed once where it enters (command-line flags, graph attributes,
// machine.json, hwmodel system files) and passed as this type everywhere else.
#include <cstdint>
#include <string>

#include "base/enum_table.h"

namespace bertlab {

// fp32: GEMMs in f32. bf16: GEMMs on bf16 copies of their f32 inputs, accumulating and
// writing in f32 (mixed precision as in PyTorch's autocast). Columns: the enum; its name in
// flags, graph attributes and run metadata (to_string); its key in machine.json and hwmodel
// system files (file_key: gemm_peak_gflops keys).
#define BERTLAB_PRECISIONS(X) X(fp32, "fp32", "f32") X(bf16, "bf16", "bf16")
BERTLAB_ENUM(Precision, uint8_t, BERTLAB_PRECISIONS)

const char* file_key(Precision p);
// Accepts either spelling ("fp32" or "f32", "bf16"); throws Error naming `what` otherwise.
Precision precision_from_string(const std::string& s, const std::string& what = "precision");

}  // namespace bertlab

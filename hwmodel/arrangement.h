#pragma once
// The data arrangements the accelerator estimate compares, as one table: each row says what
// differs between them (docs/hwmodel.md, "Adding an arrangement"). Code that depends on the
// arrangement asks its row instead of testing the enum, so a new arrangement is one file
// with its schedule's entries plus one row in arrangement.cpp.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bertlab {
struct GemmShape;
}

namespace bertlab::hw {

enum class Arrangement : uint8_t { rwma, bwma };

struct GemmWork;
struct NodeEstimate;
struct SystemDesc;
struct Traffic;
class TraceSim;
namespace analytic_detail {
class DramStreams;
}

// How a GEMM whose A operand is the transpose of a stored activation reads it.
enum class TransposedOperand : uint8_t {
  converted_copy,  // a layout conversion writes a transposed copy first (its own node)
  tiles_in_array,  // S x S tiles read whole and fed to the array transposed: no conversion
};

struct ArrangementDesc {
  Arrangement id;
  const char* name;  // CLI value, CSV/JSON field, column headers
  // Layout (layout.h): columns per panel of a matrix at kernel S; 0 means row-major.
  int64_t (*panel_width)(int64_t S);
  TransposedOperand transposed_operand;
  // GEMM schedule entries, all over the same work items (work.h):
  //  the analytic traffic of every instance (analytic.h),
  void (*analytic_gemm)(const GemmWork& w, const SystemDesc& s, int64_t cores, analytic_detail::DramStreams& dram,
                        Traffic& t);
  //  every address of the schedule, fed to the exact simulator (tracesim.h),
  void (*trace_gemm)(TraceSim& sim, const GemmWork& w, int64_t cores);
  //  the array cycles per core and the tile and issue counts (estimate.h), with its terms.
  void (*gemm_compute)(const GemmWork& w, const GemmShape& gm, const SystemDesc& s, std::vector<double>& per_core,
                       NodeEstimate& n, bool terms);
  // Words for the estimate's terms (--explain), where the lowering differs.
  const char* head_split;     // a head's Q read in place from qkv
  const char* head_operand;   // the (L,d) operand of a backward attention GEMM
  const char* head_concat;    // heads of the context written in place
  const char* transpose;      // a conversion of K^T, V^T or an activation
  const char* row_access;     // a row op's rows
  const char* rows_gathered;  // gradient rows of the embedding backward
  const char* rows_scattered; // the embedding's output rows
  const char* transposed_dy;  // dy^T of the weight gradient
  const char* transposed_ll;  // the (L,L) operand of dK, dV
};

// Every arrangement, in enum order.
std::span<const ArrangementDesc> arrangements();
const ArrangementDesc& arrangement_desc(Arrangement a);
const char* to_string(Arrangement a);
// The arrangement named `name`; throws Error naming `what` and the valid names otherwise.
Arrangement arrangement_from_string(const std::string& name, const std::string& what);

}  // namespace bertlab::hw

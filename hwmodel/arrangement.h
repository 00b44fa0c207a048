#pragma once
// The data arrangements the accelerator estimate compares, as one table: each row says what
// differs between them (docs/hwmodel.md, "Adding an arrangement"). Code that depends on the
// arrangement asks its row instead of testing the enum, so a new arrangement is one file
// (arrangement_<name>.cpp, defining its row) plus one line in BERTLAB_ARRANGEMENTS.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/enum_table.h"

namespace bertlab {
struct GemmShape;
}

namespace bertlab::hw {

// Every arrangement, in table order: its enum value and its name (CLI --arrangement, CSV and
// JSON field, summary columns). Each names a namespace whose file (arrangement_<id>.cpp) defines
// its row, `const ArrangementDesc <id>::desc`.
#define BERTLAB_ARRANGEMENTS(X) \
  X(rwma, "rwma")               \
  X(bwma, "bwma")               \
  X(tiled, "tiled")
BERTLAB_ENUM(Arrangement, uint8_t, BERTLAB_ARRANGEMENTS)

// The arrangement paper's two (row-wise and block-wise): what `bertlab estimate --arrangement both`
// runs and the summary always shows, and all that the code written for the paper's kernels
// covers (the in-order core model, the reference kernels, --paper-table).
inline constexpr std::array<Arrangement, 2> kPaperArrangements{Arrangement::rwma, Arrangement::bwma};
// The first row: the baseline of the summary's speedups, and the label of estimates that do not
// depend on the arrangement (the cpu kind).
inline constexpr Arrangement kBaselineArrangement{};

struct GemmWork;
struct NodeEstimate;
struct Placement;
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
  Arrangement id;  // its value: row i of the table has id i (checked when the table is built)
  // Layout (layout.h): the address of element (r, c) of a matrix placed at p, and the bytes
  // the matrix occupies (padding included); every address the estimate and the trace
  // simulator use is this function's (MatrixView::addr).
  uint64_t (*address)(const Placement& p, int64_t r, int64_t c);
  int64_t (*bytes)(int64_t rows, int64_t cols, int64_t elem, int64_t S);
  // The same layout's panel form, when it has one: columns per panel at kernel S (0:
  // row-major), MatrixView's arithmetic, which the closed-form line counts read; null for any
  // other layout, whose views call `address` (test_hwmodel_arrangements.cpp checks the two agree).
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

// Each arrangement's row, defined in its own file.
#define BERTLAB_ARRANGEMENT_ROW_DECL_(id, name) \
  namespace id {                                \
  extern const ArrangementDesc desc;            \
  }
BERTLAB_ARRANGEMENTS(BERTLAB_ARRANGEMENT_ROW_DECL_)
#undef BERTLAB_ARRANGEMENT_ROW_DECL_

// Every arrangement, in enum order.
std::span<const ArrangementDesc> arrangements();
const ArrangementDesc& arrangement_desc(Arrangement a);
// The arrangement named `name`; throws Error naming `what` and the valid names otherwise.
Arrangement arrangement_from_string(const std::string& name, const std::string& what);

}  // namespace bertlab::hw

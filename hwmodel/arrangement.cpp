#include "hwmodel/arrangement.h"

#include <fmt/format.h>

#include <iterator>

#include "base/error.h"

namespace bertlab::hw {

// Each arrangement's entries, defined in its own file (arrangement_<name>.cpp).
#define BERTLAB_ARRANGEMENT_ENTRIES(ns)                                                                       \
  namespace ns {                                                                                              \
  int64_t panel_width(int64_t S);                                                                             \
  void analytic_gemm(const GemmWork& w, const SystemDesc& s, int64_t cores, analytic_detail::DramStreams& dram, \
                     Traffic& t);                                                                             \
  void trace_gemm(TraceSim& sim, const GemmWork& w, int64_t cores);                                           \
  void gemm_compute(const GemmWork& w, const GemmShape& gm, const SystemDesc& s, std::vector<double>& per_core, \
                    NodeEstimate& n, bool terms);                                                             \
  }
BERTLAB_ARRANGEMENT_ENTRIES(rwma)
BERTLAB_ARRANGEMENT_ENTRIES(bwma)
#undef BERTLAB_ARRANGEMENT_ENTRIES

namespace {

// One row per arrangement, in enum order.
constexpr ArrangementDesc kArrangements[] = {
    {
        .id = Arrangement::rwma,
        .name = "rwma",
        .panel_width = rwma::panel_width,
        .transposed_operand = TransposedOperand::converted_copy,
        .analytic_gemm = rwma::analytic_gemm,
        .trace_gemm = rwma::trace_gemm,
        .gemm_compute = rwma::gemm_compute,
        .head_split = "by strided rows",
        .head_operand = "strided rows",
        .head_concat = "strided rows",
        .transpose = "row-major transpose",
        .row_access = "each row contiguous",
        .rows_gathered = "read contiguously",
        .rows_scattered = "as a contiguous row",
        .transposed_dy = "from a row-major transposed copy (conversion node)",
        .transposed_ll = "the (L,L) operand transposed into a row-major copy first",
    },
    {
        .id = Arrangement::bwma,
        .name = "bwma",
        .panel_width = bwma::panel_width,
        .transposed_operand = TransposedOperand::tiles_in_array,
        .analytic_gemm = bwma::analytic_gemm,
        .trace_gemm = bwma::trace_gemm,
        .gemm_compute = bwma::gemm_compute,
        .head_split = "free: a head owns its panels",
        .head_operand = "a head owns its panels",
        .head_concat = "free: panels",
        .transpose = "S x S tiles moved whole",
        .row_access = "each row gathered from its column panels (strided)",
        .rows_gathered = "gathered from the column panels",
        .rows_scattered = "scattered into the column panels",
        .transposed_dy = "read as S x S tiles of dy's panels, transposed on the way into the array",
        .transposed_ll = "the (L,L) operand transposed tile by tile",
    },
};

}  // namespace

std::span<const ArrangementDesc> arrangements() { return kArrangements; }

const ArrangementDesc& arrangement_desc(Arrangement a) {
  const auto i = static_cast<size_t>(a);
  check(i < std::size(kArrangements) && kArrangements[i].id == a, "arrangement {} has no row in the table", i);
  return kArrangements[i];
}

const char* to_string(Arrangement a) { return arrangement_desc(a).name; }

Arrangement arrangement_from_string(const std::string& name, const std::string& what) {
  std::string names;
  for (const auto& d : kArrangements) {
    if (name == d.name) return d.id;
    names += names.empty() ? d.name : std::string(", ") + d.name;
  }
  fail("{}: unknown arrangement '{}' (expected one of: {})", what, name, names);
}

}  // namespace bertlab::hw

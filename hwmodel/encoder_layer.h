#pragma once
// The ops of one BERT encoder layer as the arrangement paper's TiC-SAT code runs them (int8,
// one S x S weight-stationary array per core), with their shapes and the operand buffers each
// op touches. Shared by the reference kernels (hwmodel/reference/) and the in-order core
// model (core_model.h) so that both place the operands at the same offsets: the L1 and LLC
// set conflicts of the two then come from the same addresses.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "hwmodel/arrangement.h"
#include "hwmodel/layout.h"

namespace bertlab::hw {

enum class LayerRegion : uint8_t { attention, ffn };

// Every op of the layer, declared once: X(op, gemm, region, per_layer). region: ops that run
// twice run once after each sub-layer (see per_layer, the times it runs in one layer).
#define BERTLAB_LAYER_OPS(X)                                                                     \
  X(qkv, true, attention, 1)          /* X (seq x hidden) * W (hidden x 3 hidden): Q, K, V */   \
  X(k_transpose, false, attention, 1) /* K of each head -> K^T as the scores' weight */          \
  X(scores, true, attention, 1)       /* per head Q (seq x 64) * K^T (64 x seq) */               \
  X(softmax, false, attention, 1)     /* per head, rows of the scores (lookup exp + sum, divide) */ \
  X(context, true, attention, 1)      /* per head P (seq x seq) * V (seq x 64) */                \
  X(attn_out, true, attention, 1)     /* context (seq x hidden) * W (hidden x hidden) */         \
  X(residual_add, false, ffn, 2)      /* y += x over seq x hidden */                             \
  X(layernorm, false, ffn, 2)         /* rows of seq x hidden: sum, variance, normalise */       \
  X(ffn_in, true, ffn, 1)             /* (seq x hidden) * W (hidden x ff) */                     \
  X(gelu, false, ffn, 1)              /* lookup over seq x ff */                                 \
  X(ffn_out, true, ffn, 1)            /* (seq x ff) * W (ff x hidden) */

enum class LayerOp : uint8_t {
#define BERTLAB_LAYER_OP_ENUM(op, gemm, region, per_layer) op,
  BERTLAB_LAYER_OPS(BERTLAB_LAYER_OP_ENUM)
#undef BERTLAB_LAYER_OP_ENUM
};

struct LayerOpInfo {
  LayerOp op;
  const char* name;
  bool gemm;
  LayerRegion region;
  int per_layer;
};
inline constexpr LayerOpInfo kLayerOpTable[] = {
#define BERTLAB_LAYER_OP_ROW(op, gemm, region, per_layer) {LayerOp::op, #op, gemm, LayerRegion::region, per_layer},
    BERTLAB_LAYER_OPS(BERTLAB_LAYER_OP_ROW)
#undef BERTLAB_LAYER_OP_ROW
};
inline const LayerOpInfo& info(LayerOp op) { return kLayerOpTable[static_cast<int>(op)]; }
// LayerOp's names are the table's (base/enum_table.h's templates use them).
constexpr auto enum_names(LayerOp) {
  std::array<const char*, std::size(kLayerOpTable)> names{};
  for (size_t i = 0; i < names.size(); ++i) names[i] = kLayerOpTable[i].name;
  return names;
}
inline const char* to_string(LayerOp op) { return enum_name(op); }
// Throws Error naming the valid names when `name` is not an op of the table.
inline LayerOp layer_op_from_string(const std::string& name) { return enum_from_string<LayerOp>(name, "encoder-layer op"); }

struct LayerDims {
  int64_t seq = 128, hidden = 768, heads = 12, head_dim = 64, ff = 3072;
};

// One GEMM Y (m x n) += A (m x k) * B (k x n) of an op, repeated per instance (head); the
// operand numbers index op_operands(), offsets are in bytes from the operand's base.
// RWMA: row-major with leading dimensions (bytes); BWMA: A and Y as [cols/S][m][S] panels
// (sub-panels of a larger matrix start at a whole panel), B as S x S tiles [n/S][k][S].
struct GemmInstance {
  int a = 0, b = 0, y = 0;
  int64_t a_off = 0, b_off = 0, y_off = 0;
};
struct LayerGemm {
  int64_t m = 0, k = 0, n = 0;
  int64_t lda = 0, ldb = 0, ldy = 0;  // RWMA row strides in bytes
  int64_t a_panel = 0, y_panel = 0;   // BWMA panel strides in bytes (rows of the whole matrix x S)
  std::vector<GemmInstance> instances;
};

// Where a simulated run places an op's operand region (2 MB aligned, as the reference driver
// aligns its region, so cache set indices agree).
inline constexpr uint64_t kRegionBase = uint64_t{1} << 40;

struct Operand {
  std::string name;
  int64_t bytes = 0;
  int64_t offset = 0;  // from the region base, 4096-aligned
};
// The buffers op `op` touches, packed one after another (page aligned).
std::vector<Operand> op_operands(LayerOp op, const LayerDims& d);
// Bytes of the region holding them.
int64_t region_bytes(const std::vector<Operand>& v);
// The GEMM an op runs (op must be a GEMM op).
LayerGemm layer_gemm(LayerOp op, Arrangement a, const LayerDims& d, int64_t S);

// The paper's kernels (TiC-SAT's encoder layer: the reference kernels, the in-order core model
// that prices them, the paper table) exist for the paper's two arrangements only
// (kPaperArrangements): whether `a` is BWMA (column panels) rather than RWMA (row-major).
// Throws Error naming `a` and `what` (the code it reached) for any other arrangement.
bool paper_bwma(Arrangement a, const char* what);

}  // namespace bertlab::hw

#pragma once
// Every op kind, declared once. BERTLAB_OP_KINDS generates the OpKind enum, its names and the
// table of facts the generic passes read (category, profile category, phase, in-place rule,
// fusion, saved-for-backward rule, hwmodel family), so a pass never matches kinds or names by
// hand. The last column names the family whose rules file defines the kind's code rules:
// runtime/rules/<family>.cpp defines `rules::<family>::<kind>` (runtime/op_rules.h: shape
// inference, FLOPs, minimal bytes, GEMM shape, backward rule, kernel binding), beside the rules
// of the kind's siblings, and kOpRules below points every row at it. A row without the column
// does not compile, a rules object named but not defined does not link, and the generic code
// (Graph, autodiff, the executor, the profiler, hwmodel) calls through kOpRules instead of
// switching over OpKind. hwmodel prices GEMMs by their GemmRole (runtime/graph.h), not their
// kind. Activations are one kind with an "activation" attribute whose values are the rows of
// ops/activation.h.
#include <array>
#include <cstddef>
#include <cstdint>

#include "base/enum_table.h"

namespace bertlab {

#define BERTLAB_PHASES(X) X(forward, "forward") X(backward, "backward") X(optimizer, "optimizer") X(communication, "communication")
BERTLAB_ENUM(Phase, uint8_t, BERTLAB_PHASES)
#define BERTLAB_CATEGORIES(X) X(gemm, "gemm") X(memory_bound, "memory_bound") X(communication, "communication")
BERTLAB_ENUM(Category, uint8_t, BERTLAB_CATEGORIES)

// The categories of the "Demystifying BERT" breakdown. Every OpKind maps to exactly one.
// Columns: the enum, its stable id (profile JSON, CSV), its label for people.
#define BERTLAB_PROFILE_CATEGORIES(X)                                                                   \
  X(gemm_linear, "gemm_linear", "projection/FFN GEMMs")         /* projection and FFN GEMMs (with fused bias/residual/activation) */ \
  X(gemm_attention, "gemm_attention", "attention batched GEMMs") /* attention batched GEMMs, forward and backward */ \
  X(gemm_dx, "gemm_dx", "backward dX GEMMs")                     /* backward dX GEMMs of linear layers */ \
  X(gemm_dw, "gemm_dw", "backward dW GEMMs")                     /* backward dW GEMMs of linear layers (and the bias gradient) */ \
  X(softmax, "softmax", "softmax")                                                                      \
  X(layernorm, "layernorm", "layernorm")                                                                \
  X(activation, "activation", "GELU/tanh")                       /* GELU (and the pooler tanh) */       \
  X(dropout, "dropout", "dropout")                                                                      \
  X(add, "add", "bias/residual adds")                            /* bias/residual adds not fused into a GEMM */ \
  X(embedding, "embedding", "embedding")                                                                \
  X(loss, "loss", "loss")                                        /* cross-entropy and its gradient */   \
  X(optimizer, "optimizer", "optimizer update")                  /* gradient norm and the AdamW/LAMB update */ \
  X(communication, "communication", "gradient allreduce")        /* the gradient allreduce of data-parallel training (MPI) */ \
  X(other, "other", "other (mask, gathers)")                     /* mask bias, first-token and masked-position gathers and their gradients */ \
  X(unattributed, "unattributed", "unattributed")                /* measured step time outside any node (loop, timer and dispatch overhead) */
BERTLAB_ENUM(ProfileCategory, uint8_t, BERTLAB_PROFILE_CATEGORIES)
inline constexpr size_t kProfileCategoryCount = enum_count<ProfileCategory>;

// How hwmodel costs a node (hwmodel/estimate.cpp switches over this, not over OpKind).
enum class HwFamily : uint8_t {
  gemm,            // lowered to the array (or the CPU's measured GEMM rates)
  softmax,         // row passes: three over x
  layernorm,       // row passes: two over x, gamma and beta as vectors
  softmax_grad,    // row passes: two over dy and y
  layernorm_grad,  // row passes: three over dy and x, dgamma and dbeta accumulated
  stream,          // element-wise: inputs streamed in, outputs streamed out
  embedding,       // row gathers from three tables
  embedding_grad,  // row scatter-adds into three tables
  update,          // optimizer and allreduce: fp32 read-modify-write streams
  generic,         // minimal bytes at the memory bandwidth
};

// The memory plan may write the output over input 0 when that input dies at the node.
enum class InPlace : uint8_t { no, yes };
// A backward node reading this node's output: keeps it from the forward pass, or recomputes it
// from the node's inputs (runtime/autodiff.cpp, saved: the forward copy then dies early; chosen
// for element-wise and row ops and the two attention products, whose recomputation costs little
// against the memory it frees). For activations the activation's row decides (ops/activation.h,
// keep).
enum class Saved : uint8_t { kept, recomputed, per_activation };
// The fusion pass that folds this node into a preceding linear's epilogue (runtime/fusion.h).
enum class Fusion : uint8_t { none, linear_activation, linear_residual };

// Shapes use B batch, S sequence, H hidden, nh heads, d head size, V vocab, P masked positions
// per sequence. docs/graph-format.md lists inputs, outputs, FLOPs and bytes of each.
//   X(kind, category, profile category, phase, in place, saved, fusion, hwmodel family, rules)
#define BERTLAB_OP_KINDS(X)                                                                      \
  /* ids(B,S) i32, type_ids(B,S) i32, word(V,H), pos(P,H), type(T,H) -> (B,S,H) */               \
  X(embedding, memory_bound, embedding, forward, no, kept, none, embedding, embedding)          \
  /* attention_mask(B,S) i32 -> additive bias (B,S) f32: 0 keep, lowest float drop */           \
  X(mask_bias, memory_bound, other, forward, no, kept, none, generic, elementwise)              \
  /* x(...,K), w(N,K), b(N) [, residual(...,N)] -> (...,N); attr activation (epilogue) */        \
  X(linear, gemm, gemm_linear, forward, no, kept, none, gemm, linear)                           \
  /* qkv(B,S,3H), bias(B,S) -> scores(B,nh,S,S) = Q K^T * scale + bias */                       \
  X(attn_scores, gemm, gemm_attention, forward, no, recomputed, none, gemm, attention)          \
  /* x(...,L) -> softmax over the last axis */                                                   \
  X(softmax, memory_bound, softmax, forward, yes, recomputed, none, softmax, normalization)     \
  /* probs(B,nh,S,S), qkv(B,S,3H) -> ctx(B,S,H) = P V, heads concatenated */                     \
  X(attn_context, gemm, gemm_attention, forward, no, recomputed, none, gemm, attention)         \
  /* a, b (same shape) -> a + b */                                                               \
  X(add, memory_bound, add, forward, no, kept, linear_residual, stream, elementwise)            \
  /* x -> alpha * x; attr alpha (the residual's scale of train --residual-scale, and its grad) */ \
  X(scale, memory_bound, add, forward, no, kept, none, stream, elementwise)                     \
  /* a, b (same shape) -> a * b; its gradients are muls (da = dy * b, db = dy * a) */            \
  X(mul, memory_bound, add, forward, no, kept, none, stream, elementwise)                       \
  /* x(...,H), gamma(H), beta(H) -> (...,H); attr eps */                                         \
  X(layernorm, memory_bound, layernorm, forward, no, recomputed, none, layernorm, normalization) \
  /* x -> act(x); attr activation (ops/activation.h: gelu, tanh, relu, silu) */                  \
  X(activation, memory_bound, activation, forward, yes, per_activation, linear_activation,       \
    stream, elementwise)                                                                         \
  /* x(B,S,H) -> (B,H): the [CLS] row of each sequence */                                        \
  X(first_token, memory_bound, other, forward, no, kept, none, generic, embedding)              \
  /* x -> x * keep / (1 - p); attrs p, salt (counter-based mask) */                              \
  X(dropout, memory_bound, dropout, forward, yes, recomputed, none, stream, elementwise)        \
  /* x(B,S,H), positions(B,P) i32 -> (B*P,H) */                                                  \
  X(gather_rows, memory_bound, other, forward, no, kept, none, generic, embedding)              \
  /* logits(N,C), labels(N) i32 (-100: ignored) -> (3): loss sum, correct, count; attr loss */   \
  X(cross_entropy, memory_bound, loss, forward, no, kept, none, generic, loss)                  \
  /* logits(N,C), labels(N) -> dlogits(N,C); attr loss (mlm | nsp) */                            \
  X(cross_entropy_grad, memory_bound, loss, backward, no, kept, none, generic, loss)            \
  /* dy(...,N), w(N,K) -> dx(...,K) = dy w */                                                    \
  X(linear_grad_input, gemm, gemm_dx, backward, no, kept, none, gemm, linear)                   \
  /* dy(...,N), x(...,K) -> dw(N,K) += dy^T x, db(N) += sum dy */                                \
  X(linear_grad_weight, gemm, gemm_dw, backward, no, kept, none, gemm, linear)                  \
  /* dscores(B,nh,S,S), qkv -> dqkv(B,S,3H), Q third = dS K * scale */                           \
  X(attn_scores_grad_q, gemm, gemm_attention, backward, no, kept, none, gemm, attention)        \
  /* dscores, qkv -> dqkv, K third = dS^T Q * scale */                                           \
  X(attn_scores_grad_k, gemm, gemm_attention, backward, no, kept, none, gemm, attention)        \
  /* dctx(B,S,H), qkv -> dprobs(B,nh,S,S) = dctx V^T */                                          \
  X(attn_context_grad_probs, gemm, gemm_attention, backward, no, kept, none, gemm, attention)   \
  /* dctx(B,S,H), probs -> dqkv(B,S,3H), V third = P^T dctx */                                   \
  X(attn_context_grad_v, gemm, gemm_attention, backward, no, kept, none, gemm, attention)       \
  /* dy, y -> dx = y * (dy - sum(dy * y)) */                                                     \
  X(softmax_grad, memory_bound, softmax, backward, no, kept, none, softmax_grad, normalization) \
  /* dy, x, gamma -> dx, dgamma +=, dbeta += */                                                  \
  X(layernorm_grad, memory_bound, layernorm, backward, no, kept, none, layernorm_grad, normalization) \
  /* dy, x (or y, per the activation's grad_from_output) -> dx; attr activation */              \
  X(activation_grad, memory_bound, activation, backward, no, kept, none, stream, elementwise)   \
  /* dy -> dx with the forward mask; attrs p, salt */                                            \
  X(dropout_grad, memory_bound, dropout, backward, yes, kept, none, stream, elementwise)        \
  /* dout(B,S,H), ids, type_ids -> dword +=, dpos +=, dtype += */                                \
  X(embedding_grad, memory_bound, embedding, backward, no, kept, none, embedding_grad, embedding) \
  /* dy(B*P,H), positions(B,P), like(B,S,H) -> dx(B,S,H), zero elsewhere */                      \
  X(gather_rows_grad, memory_bound, other, backward, no, kept, none, generic, embedding)        \
  /* dy(B,H), like(B,S,H) -> dx(B,S,H), zero but the first row */                                \
  X(first_token_grad, memory_bound, other, backward, no, kept, none, generic, embedding)        \
  /* every parameter gradient -> (1) global L2 norm */                                           \
  X(grad_norm, memory_bound, optimizer, optimizer, no, kept, none, update, update)           \
  /* param, grad, m, v, norm(1) -> param, m, v updated in place; attrs decay, segments */        \
  X(adamw_update, memory_bound, optimizer, optimizer, no, kept, none, update, update)        \
  X(lamb_update, memory_bound, optimizer, optimizer, no, kept, none, update, update)         \
  /* every parameter gradient -> the same, summed over the ranks in place; attr world_size */    \
  /* (data parallelism, runtime/distributed.h) */                                                \
  X(allreduce, communication, communication, communication, no, kept, none, update, update)

enum class OpKind : uint8_t {
#define BERTLAB_OP_ENUM(kind, ...) kind,
  BERTLAB_OP_KINDS(BERTLAB_OP_ENUM)
#undef BERTLAB_OP_ENUM
};

struct OpInfo {
  OpKind kind;
  const char* name;
  Category category;
  ProfileCategory profile;
  Phase phase;  // of the nodes of this kind (add also sums gradients in the backward)
  InPlace in_place;
  Saved saved;
  Fusion fusion;
  HwFamily family;
};

inline constexpr std::array kOpTable{
#define BERTLAB_OP_ROW(kind, cat, prof, phase, inplace, saved, fusion, family, file)                  \
  OpInfo{OpKind::kind,       #kind,           Category::cat, ProfileCategory::prof, Phase::phase, \
         InPlace::inplace,   Saved::saved,    Fusion::fusion, HwFamily::family},
    BERTLAB_OP_KINDS(BERTLAB_OP_ROW)
#undef BERTLAB_OP_ROW
};
inline constexpr size_t kOpKindCount = kOpTable.size();

// The table's length and order are the enum's: row i describes kind i, and every kind has a row.
constexpr bool op_table_in_order() {
  for (size_t i = 0; i < kOpTable.size(); ++i)
    if (static_cast<size_t>(kOpTable[i].kind) != i) return false;
  return true;
}
static_assert(op_table_in_order(), "kOpTable rows must follow the OpKind enum");

constexpr const OpInfo& op_info(OpKind k) { return kOpTable[static_cast<size_t>(k)]; }

// The code rules of each kind (struct OpRules: runtime/op_rules.h), row i those of kind i.
struct OpRules;
#define BERTLAB_OP_RULES_DECLARE(kind, cat, prof, phase, inplace, saved, fusion, family, file) \
  namespace rules::file {                                                                       \
  extern const OpRules kind;                                                                   \
  }
BERTLAB_OP_KINDS(BERTLAB_OP_RULES_DECLARE)
#undef BERTLAB_OP_RULES_DECLARE
inline constexpr std::array<const OpRules*, kOpKindCount> kOpRules{
#define BERTLAB_OP_RULES_ROW(kind, cat, prof, phase, inplace, saved, fusion, family, file) &rules::file::kind,
    BERTLAB_OP_KINDS(BERTLAB_OP_RULES_ROW)
#undef BERTLAB_OP_RULES_ROW
};
constexpr bool every_kind_has_rules() {
  for (const OpRules* r : kOpRules)
    if (r == nullptr) return false;
  return true;
}
static_assert(every_kind_has_rules(), "every row of BERTLAB_OP_KINDS names the rules of its kind");

// OpKind's names are the table's (base/enum_table.h's templates use them).
constexpr auto enum_names(OpKind) {
  std::array<const char*, kOpKindCount> names{};
  for (size_t i = 0; i < kOpKindCount; ++i) names[i] = kOpTable[i].name;
  return names;
}
inline const char* to_string(OpKind k) { return enum_name(k); }

}  // namespace bertlab

#pragma once
// Lab 1: the functions you write in labs/profile/student.cpp.
//
// Part A. The cost of one node of BERT's graph, by hand: its FLOPs and the least number of bytes
// it must move (every tensor it reads, read once, and every tensor it writes, written once;
// 4 bytes per element: every tensor here is fp32, even in a bf16 run). FLOP conventions:
//   a GEMM (M x K) * (K x N) is 2*M*N*K FLOPs (a multiply and an add per term);
//   an element-wise add, scale or bias is 1 FLOP per output element;
//   layernorm: 7 FLOPs per element (sum, subtract, square, sum, scale, gamma, beta);
//   softmax: 5 FLOPs per element (max, subtract, exp, sum, divide).
#include <cstdint>

#include "base/enum_table.h"

namespace bertlab::lab::profile {

struct Cost {
  double flops = 0;
  double bytes = 0;
};

// A linear layer: y (rows x N) = x (rows x K) times W^T, W stored N x K, plus the bias b (N);
// when `residual`, a residual tensor (rows x N) is read and added to y as well; then an
// activation of `activation_flops` FLOPs per output element (0: no activation).
Cost linear(int64_t rows, int64_t K, int64_t N, bool residual, double activation_flops);

// Attention scores of one layer. Inputs: qkv (B x S x 3H: the queries, keys and values of the
// H-wide hidden state, stacked on the last axis) and the mask bias (B x S). For each sequence and
// each of the `heads` heads (head size H / heads): scores = Q K^T (S x S), then scaled and the
// mask bias added. Output: scores (B x heads x S x S). Which parts of qkv does this node read?
Cost attention_scores(int64_t B, int64_t S, int64_t H, int64_t heads);

// Layer normalization over the last axis: x (rows x H), gamma and beta (H) -> y (rows x H).
Cost layernorm(int64_t rows, int64_t H);

// Softmax over the last axis of the scores (B x heads x S x S) -> probabilities (same shape).
Cost softmax(int64_t B, int64_t heads, int64_t S);

// Part B. Your predictions. Start from a BERT-mini training step at batch 8, sequence 128, fp32,
// one micro-batch per step (accum 1). Does the named share of the step's FLOPs (or bytes) go up,
// down, or stay the same when one thing changes? FLOPs and bytes here are those of the graph
// (what you computed in part A, summed over all nodes), not measured time.
// (An enum class Move { up, down, same }, declared with its names, which the grader prints.)
#define BERTLAB_LAB_PROFILE_MOVES(X) X(up, "up") X(down, "down") X(same, "same")
BERTLAB_ENUM(Move, uint8_t, BERTLAB_LAB_PROFILE_MOVES)

struct Predictions {
  Move attention_flops_share_at_seq512;    // attention GEMMs + softmax, share of all FLOPs
  Move gemm_flops_share_in_bf16;           // all GEMMs, share of all FLOPs, with --precision bf16
  Move optimizer_flops_share_at_accum4;    // optimizer update, share of all FLOPs, with --accum 4
  Move softmax_bytes_share_at_seq512;      // softmax (forward and backward), share of all bytes
};

Predictions predictions();

}  // namespace bertlab::lab::profile

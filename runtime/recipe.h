#pragma once
// Pretraining recipe options that leave the checkpoint a standard BERT: how the learned
// absolute position table starts (--position-init), and the residual scale folded into the
// output projections when a checkpoint is written (--residual-scale).
// docs/training.md#pretraining-recipe.
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "runtime/bert_config.h"
#include "runtime/model.h"
#include "runtime/params.h"

namespace bertlab {

// normal: BERT's truncated normal (init_bert_params); sinusoidal: the sin/cos table of
// "Attention is all you need", scaled.
#define BERTLAB_POSITION_INITS(X) X(normal, "normal") X(sinusoidal, "sinusoidal")
BERTLAB_ENUM(PositionInit, uint8_t, BERTLAB_POSITION_INITS)

// The Hugging Face name of the learned absolute position table.
inline constexpr const char* kPositionTable = "bert.embeddings.position_embeddings.weight";

// The default amplitude of the sinusoidal table: twice the config's initializer_range (the
// token embeddings' init std), so its entries' RMS (amplitude / sqrt 2) is about 1.4 times the
// token embeddings' and the position signal is not lost beside them.
double default_position_init_scale(const BertConfig& c);

// pe (max_position_embeddings, H): pe[p][2i] = A sin(p / 10000^(2i/H)), pe[p][2i+1] = A cos(...).
void init_positions_sinusoidal(ParamStore& params, const BertConfig& c, double amplitude);

// Sequence-length warmup (--seq-len-warmup STEPS:LEN, Li et al. 2022): the first `len` tokens
// of every sequence, with the masked positions among them (the others' slots padded: position 0,
// label -100); the number of slots per sequence stays in.max_predictions.
BertInputs truncate_sequences(const BertInputs& in, int64_t len);

// --residual-scale A trains LN(A x + G(x)) in every sub-layer. LayerNorm ignores a common
// scale, so that is LN(x + G(x) / A) (its eps becoming eps / A^2: 1e-12 in BERT's configs, far
// below fp32's resolution): a plain BERT whose attention-output and FFN-output dense layers
// (weight and bias: G's last, linear step) are divided by A. The parameters of those layers
// (two a layer, weight and bias each), by their Hugging Face names.
std::vector<std::string> residual_branch_outputs(const BertConfig& c);
// Multiplies them by `factor`: 1 / A folds the training form into a plain BERT, A unfolds it.
void scale_residual_branches(ParamStore& params, const BertConfig& c, double factor);

}  // namespace bertlab

#include "runtime/bert_builder.h"

#include <cmath>

#include "runtime/autodiff.h"
#include "base/error.h"
#include "runtime/op_rules.h"

namespace bertlab {

std::string hf_layer_prefix(int64_t layer) { return fmt::format("bert.encoder.layer.{}.", layer); }

std::string qkv_name(int64_t layer, const std::string& suffix) {
  return hf_layer_prefix(layer) + "attention.self.qkv." + suffix;
}

namespace {

struct Builder {
  const BertConfig& c;
  const RunSpec& run;
  Graph g;
  int dropout_salt = 0;

  bool training() const { return run.mode == RunMode::train; }

  // A parameter; `decay`: weight decay applies (not to biases and layernorm parameters).
  int weight(const std::string& name, Shape shape, bool decay = true) {
    int id = g.add_tensor(name, std::move(shape), DType::f32, Role::weight);
    if (!decay) g.tensor(id).attrs["decay"] = false;
    return id;
  }
  // A linear layer with HF parameters <prefix>.weight (N x K) and <prefix>.bias (N).
  int linear(const std::string& node, const std::string& param, int x, int64_t n, int64_t k) {
    int w = weight(param + ".weight", {n, k});
    int b = weight(param + ".bias", {n}, false);
    return g.apply(OpKind::linear, node, {x, w, b});
  }
  int layernorm(const std::string& node, const std::string& param, int x) {
    int gamma = weight(param + ".weight", {c.hidden_size}, false);
    int beta = weight(param + ".bias", {c.hidden_size}, false);
    return g.apply(OpKind::layernorm, node, {x, gamma, beta}, {{"eps", c.layer_norm_eps}});
  }
  // The config's hidden_act, in a node named after it (<prefix>gelu).
  int activation(const std::string& prefix, int x) {
    const char* act = ops::to_string(c.hidden_act);
    return g.apply(OpKind::activation, prefix + act, {x}, {{"activation", act}});
  }
  // Nodes from `first` on, and the parameters they read, belong to a region of the encoder
  // layer (hwmodel's per-region totals; autodiff passes it on to the backward and optimizer).
  void set_region(size_t first, const char* region) {
    for (size_t i = first; i < g.nodes().size(); ++i) {
      auto& n = g.node(static_cast<int>(i));
      n.attrs["region"] = region;
      for (int t : n.inputs)
        if (g.tensor(t).role == Role::weight) g.tensor(t).attrs["region"] = region;
    }
  }
  // Dropout in training graphs (when enabled and p > 0); identity otherwise.
  int dropout(const std::string& node, int x, double p) {
    if (!training() || !run.dropout || p <= 0) return x;
    return g.apply(OpKind::dropout, node, {x}, {{"p", p}, {"salt", ++dropout_salt}});
  }

  // The residual input of a sub-layer's add: x, or A x (RunSpec::residual_scale).
  int residual(const std::string& node, int x) {
    if (run.residual_scale == 1) return x;
    return g.apply(OpKind::scale, node + "residual_scale", {x}, {{"alpha", run.residual_scale}});
  }

  int encoder_layer(int64_t i, int x, int mask_bias) {
    const int64_t H = c.hidden_size;
    const std::string node = fmt::format("encoder.{}.", i);
    const std::string hf = hf_layer_prefix(i);
    const nlohmann::json heads{{"heads", c.num_attention_heads}};

    const size_t attention_begin = g.nodes().size();
    int qkv_w = weight(qkv_name(i, "weight"), {3 * H, H});
    int qkv_b = weight(qkv_name(i, "bias"), {3 * H}, false);
    // LAMB: one trust ratio per Hugging Face tensor, three in the fused QKV.
    g.tensor(qkv_w).attrs["segments"] = g.tensor(qkv_b).attrs["segments"] = 3;
    int qkv = g.apply(OpKind::linear, node + "attention.qkv", {x, qkv_w, qkv_b});
    nlohmann::json score_attrs = heads;
    score_attrs["scale"] = 1.0 / std::sqrt(static_cast<double>(c.head_size()));
    int scores = g.apply(OpKind::attn_scores, node + "attention.scores", {qkv, mask_bias}, score_attrs);
    int probs = g.apply(OpKind::softmax, node + "attention.softmax", {scores});
    probs = dropout(node + "attention.dropout", probs, c.attention_probs_dropout_prob);
    int ctx = g.apply(OpKind::attn_context, node + "attention.context", {probs, qkv}, heads);
    int attn = linear(node + "attention.output", hf + "attention.output.dense", ctx, H, H);
    attn = dropout(node + "attention.output.dropout", attn, c.hidden_dropout_prob);
    int res1 = g.apply(OpKind::add, node + "attention.residual", {attn, residual(node + "attention.", x)});
    int h1 = layernorm(node + "attention.layernorm", hf + "attention.output.LayerNorm", res1);

    set_region(attention_begin, "attention");
    const size_t ffn_begin = g.nodes().size();
    int inter = linear(node + "ffn.intermediate", hf + "intermediate.dense", h1,
                       c.intermediate_size, H);
    int act = activation(node + "ffn.", inter);
    int out = linear(node + "ffn.output", hf + "output.dense", act, H, c.intermediate_size);
    out = dropout(node + "ffn.output.dropout", out, c.hidden_dropout_prob);
    int res2 = g.apply(OpKind::add, node + "ffn.residual", {out, residual(node + "ffn.", h1)});
    int y = layernorm(node + "ffn.layernorm", hf + "output.LayerNorm", res2);
    set_region(ffn_begin, "ffn");
    return y;
  }
};

}  // namespace

Graph build_bert(const BertConfig& c, const RunSpec& run) {
  check(run.batch > 0 && run.seq > 0, "batch ({}) and sequence length ({}) must be positive",
        run.batch, run.seq);
  check(run.seq <= c.max_position_embeddings,
        "sequence length {} exceeds max_position_embeddings {} of the config", run.seq,
        c.max_position_embeddings);
  check(run.residual_scale > 0, "residual scale {}: expected a positive factor", run.residual_scale);
  const bool train = run.mode == RunMode::train;
  const bool classifier = run.heads == Heads::sequence_classification || run.heads == Heads::token_classification;
  check(!train || run.heads != Heads::none, "training needs the pretraining or a classification head");
  check(!classifier || run.num_labels > 0, "a classification head needs num_labels > 0, got {}", run.num_labels);
  Builder b{c, run, {}};
  Graph& g = b.g;
  const int64_t H = c.hidden_size, B = run.batch, S = run.seq, P = run.predictions();
  int ids = g.add_tensor("input_ids", {B, S}, DType::i32, Role::input);
  int types = g.add_tensor("token_type_ids", {B, S}, DType::i32, Role::input);
  int mask = g.add_tensor("attention_mask", {B, S}, DType::i32, Role::input);

  int word = b.weight("bert.embeddings.word_embeddings.weight", {c.vocab_size, H});
  int pos = b.weight("bert.embeddings.position_embeddings.weight", {c.max_position_embeddings, H});
  int type = b.weight("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, H});
  int emb = g.apply(OpKind::embedding, "embeddings", {ids, types, word, pos, type});
  int x = b.layernorm("embeddings.layernorm", "bert.embeddings.LayerNorm", emb);
  x = b.dropout("embeddings.dropout", x, c.hidden_dropout_prob);
  int mask_bias = g.apply(OpKind::mask_bias, "attention.mask_bias", {mask});

  for (int64_t i = 0; i < c.num_hidden_layers; ++i) x = b.encoder_layer(i, x, mask_bias);
  if (!train) g.mark_output(x, "last_hidden_state");

  // BertForTokenClassification has no pooler (add_pooling_layer=False); neither has a
  // masked-LM-only training graph (BertForMaskedLM), whose pooler and NSP parameters are
  // then left out of the graph: no gradient, no update.
  const bool mlm_only = train && run.heads == Heads::pretraining && !run.nsp;
  int pooled = -1;
  if (run.heads != Heads::token_classification && !mlm_only) {
    int cls = g.apply(OpKind::first_token, "pooler.first_token", {x});
    int pooled_pre = b.linear("pooler.dense", "bert.pooler.dense", cls, H, H);
    pooled = g.apply(OpKind::activation, "pooler.tanh", {pooled_pre}, {{"activation", "tanh"}});
    if (!train) g.mark_output(pooled, "pooler_output");
  }
  if (classifier) {
    // Hugging Face: dropout(hidden_dropout_prob), then `classifier` (num_labels x H) on the
    // pooler output, or on every token (all positions gathered into rows, so the logits are
    // (B*S, num_labels) and labels are -100 where not predicted).
    const int64_t L = run.num_labels;
    int in = pooled;
    int64_t labels_len = B;
    if (run.heads == Heads::token_classification) {
      int positions = g.add_tensor("token_positions", {B, S}, DType::i32, Role::input);
      in = g.apply(OpKind::gather_rows, "classifier.gather", {x, positions});
      labels_len = B * S;
    }
    in = b.dropout("classifier.dropout", in, c.hidden_dropout_prob);
    int logits = b.linear("classifier", "classifier", in, L, H);
    if (train) {
      int labels = g.add_tensor("labels", {labels_len}, DType::i32, Role::input);
      g.mark_output(g.apply(OpKind::cross_entropy, "classifier.loss", {logits, labels}, {{"loss", to_string(LossKind::classifier)}}), "loss");
    } else {
      g.mark_output(logits, "logits");
    }
  }

  if (run.heads == Heads::pretraining) {
    // Training runs the MLM head on the masked positions only.
    int mlm_in = x;
    if (train) {
      int positions = g.add_tensor("masked_lm_positions", {B, P}, DType::i32, Role::input);
      mlm_in = g.apply(OpKind::gather_rows, "mlm.gather", {x, positions});
    }
    int t = b.linear("mlm.transform", "cls.predictions.transform.dense", mlm_in, H, H);
    t = b.activation("mlm.", t);
    t = b.layernorm("mlm.layernorm", "cls.predictions.transform.LayerNorm", t);
    int decoder_bias = b.weight("cls.predictions.bias", {c.vocab_size}, false);
    int logits = g.apply(OpKind::linear, "mlm.decoder", {t, word, decoder_bias});
    int nsp = mlm_only ? -1 : b.linear("nsp", "cls.seq_relationship", pooled, 2, H);
    if (train) {
      int labels = g.add_tensor("masked_lm_labels", {B * P}, DType::i32, Role::input);
      g.mark_output(g.apply(OpKind::cross_entropy, "mlm.loss", {logits, labels}, {{"loss", to_string(LossKind::mlm)}}), "mlm_loss");
      if (!mlm_only) {
        int nsp_labels = g.add_tensor("next_sentence_labels", {B}, DType::i32, Role::input);
        g.mark_output(g.apply(OpKind::cross_entropy, "nsp.loss", {nsp, nsp_labels}, {{"loss", to_string(LossKind::nsp)}}), "nsp_loss");
      }
    } else {
      g.mark_output(logits, "mlm_logits");
      g.mark_output(nsp, "nsp_logits");
    }
  }
  g.meta = {{"config", config_to_json(c)},
            {"run",
             {{"batch", run.batch},
              {"seq", run.seq},
              {"mode", to_string(run.mode)},
              {"heads", to_string(run.heads)},
              {"precision", to_string(run.precision)}}}};
  if (train) {
    g.meta["run"]["max_predictions"] = P;
    g.meta["run"]["dropout"] = run.dropout;
    if (run.heads == Heads::pretraining) g.meta["run"]["nsp"] = run.nsp;
    g.meta["run"]["optimizer"] = to_string(run.optimizer);
    g.meta["run"]["world_size"] = run.world_size;
    // The classifier loss ("loss": "classifier") is divided by StepContext::nsp_denominator:
    // the labelled sequences or tokens of the whole accumulated batch.
    if (classifier) g.meta["run"]["num_labels"] = run.num_labels;
    append_backward(g, classifier ? std::vector<std::string>{"classifier.loss"}
                       : mlm_only ? std::vector<std::string>{"mlm.loss"}
                                  : std::vector<std::string>{"mlm.loss", "nsp.loss"});
    if (run.world_size > 1) append_allreduce(g, run.world_size, run.allreduce);
    append_optimizer(g, run.optimizer);
  }
  set_gemm_precision(g, run.precision);
  return g;
}

}  // namespace bertlab

#include "runtime/bert_config.h"

#include <array>
#include <fstream>
#include <type_traits>

#include "base/error.h"
#include "base/json_file.h"

namespace bertlab {

namespace {

template <typename T>
void read_field(const nlohmann::json& j, const char* key, T& out, const std::string& origin) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  // nlohmann converts 48.5 and true to an integer silently; a size must be written as one.
  if constexpr (std::is_integral_v<T>)
    check(j.at(key).is_number_integer(),
          "{}: field '{}' has the wrong type (expected an integer, got {})", origin, key,
          j.at(key).dump());
  if constexpr (std::is_floating_point_v<T>)
    check(j.at(key).is_number(), "{}: field '{}' has the wrong type (expected a number, got {})",
          origin, key, j.at(key).dump());
  if constexpr (std::is_same_v<T, std::string>)
    check(j.at(key).is_string(), "{}: field '{}' has the wrong type (expected a string, got {})",
          origin, key, j.at(key).dump());
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: field '{}' has the wrong type ({})", origin, key, j.at(key).dump());
  }
}

void positive(int64_t v, const char* key, const std::string& origin) {
  check(v > 0, "{}: field '{}' must be a positive integer, got {}", origin, key, v);
}

// Upper bounds keep every size product (parameter counts, tensor byte counts, GEMM tiles in
// the accelerator model) far from int64 overflow and from hours-long allocations. They are
// far above any published BERT: 2^24 token ids (exact in float32), hidden 65,536, FFN 2^20.
void at_most(int64_t v, int64_t limit, const char* key, const std::string& origin) {
  check(v <= limit, "{}: field '{}' is {}, more than the {} bertlab supports", origin, key, v, limit);
}

void probability(double v, const char* key, const std::string& origin) {
  check(v >= 0 && v < 1, "{}: field '{}' must be in [0, 1), got {}", origin, key, v);
}

}  // namespace

int64_t BertConfig::parameter_count(bool with_pretraining_heads) const {
  const int64_t H = hidden_size, F = intermediate_size;
  int64_t emb = (vocab_size + max_position_embeddings + type_vocab_size) * H + 2 * H;
  int64_t layer = 4 * H * H + 4 * H + 2 * H * F + F + H + 4 * H;
  int64_t pooler = H * H + H;
  int64_t total = emb + num_hidden_layers * layer + pooler;
  if (with_pretraining_heads) total += H * H + H + 2 * H + vocab_size + 2 * H + 2;
  return total;
}

BertConfig config_from_json(const nlohmann::json& j, const std::string& origin) {
  check(j.is_object(), "{}: expected a JSON object", origin);
  BertConfig c;
  read_field(j, "vocab_size", c.vocab_size, origin);
  read_field(j, "hidden_size", c.hidden_size, origin);
  read_field(j, "num_hidden_layers", c.num_hidden_layers, origin);
  read_field(j, "num_attention_heads", c.num_attention_heads, origin);
  read_field(j, "intermediate_size", c.intermediate_size, origin);
  std::string hidden_act = ops::to_string(c.hidden_act);
  read_field(j, "hidden_act", hidden_act, origin);
  read_field(j, "hidden_dropout_prob", c.hidden_dropout_prob, origin);
  read_field(j, "attention_probs_dropout_prob", c.attention_probs_dropout_prob, origin);
  read_field(j, "max_position_embeddings", c.max_position_embeddings, origin);
  read_field(j, "type_vocab_size", c.type_vocab_size, origin);
  read_field(j, "initializer_range", c.initializer_range, origin);
  read_field(j, "layer_norm_eps", c.layer_norm_eps, origin);
  read_field(j, "pad_token_id", c.pad_token_id, origin);
  read_field(j, "position_embedding_type", c.position_embedding_type, origin);

  // bertlab's MLM decoder is the word embedding matrix, as in BERT (HF's default).
  check(!j.contains("tie_word_embeddings") || j.at("tie_word_embeddings") != false,
        "{}: field 'tie_word_embeddings' is false; bertlab ties the MLM decoder to the word embeddings "
        "(untied decoders are not supported)", origin);
  if (j.contains("model_type") && j.at("model_type").is_string())
    check(j.at("model_type") == "bert", "{}: field 'model_type' is \"{}\", expected \"bert\"",
          origin, j.at("model_type").get<std::string>());
  positive(c.vocab_size, "vocab_size", origin);
  positive(c.hidden_size, "hidden_size", origin);
  positive(c.num_hidden_layers, "num_hidden_layers", origin);
  positive(c.num_attention_heads, "num_attention_heads", origin);
  positive(c.intermediate_size, "intermediate_size", origin);
  positive(c.max_position_embeddings, "max_position_embeddings", origin);
  positive(c.type_vocab_size, "type_vocab_size", origin);
  at_most(c.vocab_size, int64_t{1} << 24, "vocab_size", origin);
  at_most(c.hidden_size, int64_t{1} << 16, "hidden_size", origin);
  at_most(c.num_hidden_layers, 4096, "num_hidden_layers", origin);
  at_most(c.intermediate_size, int64_t{1} << 20, "intermediate_size", origin);
  at_most(c.max_position_embeddings, int64_t{1} << 20, "max_position_embeddings", origin);
  at_most(c.type_vocab_size, int64_t{1} << 16, "type_vocab_size", origin);
  check(c.parameter_count(true) <= (int64_t{1} << 40),
        "{}: the model has {} parameters, more than the 2^40 bertlab supports", origin, c.parameter_count(true));
  check(c.hidden_size % c.num_attention_heads == 0,
        "{}: hidden_size {} is not divisible by num_attention_heads {}", origin, c.hidden_size,
        c.num_attention_heads);
  try {
    // Hugging Face's ACT2FN names SiLU "silu" and "swish"; the file is written back with "silu".
    c.hidden_act = ops::activation_from_string(hidden_act == "swish" ? "silu" : hidden_act);
  } catch (const Error& e) {
    fail("{}: field 'hidden_act': {}", origin, e.what());
  }
  check(c.hidden_act != ops::Activation::none, "{}: field 'hidden_act' is \"none\"; BERT needs an activation",
        origin);
  check(c.position_embedding_type == "absolute",
        "{}: field 'position_embedding_type' is \"{}\"; only \"absolute\" is supported", origin,
        c.position_embedding_type);
  probability(c.hidden_dropout_prob, "hidden_dropout_prob", origin);
  probability(c.attention_probs_dropout_prob, "attention_probs_dropout_prob", origin);
  check(c.initializer_range > 0, "{}: field 'initializer_range' must be positive, got {}", origin,
        c.initializer_range);
  check(c.layer_norm_eps > 0, "{}: field 'layer_norm_eps' must be positive, got {}", origin,
        c.layer_norm_eps);
  check(c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size,
        "{}: pad_token_id {} is outside the vocabulary [0, {})", origin, c.pad_token_id,
        c.vocab_size);
  return c;
}

BertConfig load_config(const std::filesystem::path& file) {
  return config_from_json(read_json_file(file, "config file"), file.string());
}

nlohmann::json config_to_json(const BertConfig& c) {
  return {{"architectures", {"BertForPreTraining"}},
          {"model_type", "bert"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"intermediate_size", c.intermediate_size},
          {"hidden_act", ops::to_string(c.hidden_act)},
          {"hidden_dropout_prob", c.hidden_dropout_prob},
          {"attention_probs_dropout_prob", c.attention_probs_dropout_prob},
          {"max_position_embeddings", c.max_position_embeddings},
          {"type_vocab_size", c.type_vocab_size},
          {"initializer_range", c.initializer_range},
          {"layer_norm_eps", c.layer_norm_eps},
          {"pad_token_id", c.pad_token_id},
          {"position_embedding_type", c.position_embedding_type}};
}

const char* hf_architecture(Heads h) {
#define BERTLAB_HEADS_ARCHITECTURE(id, name, architecture) architecture,
  static constexpr std::array<const char*, enum_count<Heads>> kArchitectures{BERTLAB_HEADS(BERTLAB_HEADS_ARCHITECTURE)};
#undef BERTLAB_HEADS_ARCHITECTURE
  return kArchitectures.at(static_cast<size_t>(h));
}

}  // namespace bertlab

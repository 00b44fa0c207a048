#include "runtime/model.h"

#include <algorithm>
#include <fstream>

#include "runtime/bert_builder.h"
#include "runtime/checkpoint.h"
#include "base/error.h"

namespace bertlab {

Model init_model(const BertConfig& c, Heads heads, uint64_t seed, int64_t num_labels) {
  RunSpec shape;
  shape.batch = 1;
  shape.seq = 1;
  shape.heads = heads;
  shape.num_labels = num_labels;
  Model m;
  m.config = c;
  m.heads = heads;
  m.params = ParamStore::for_graph(build_bert(c, shape));
  init_bert_params(m.params, c, seed);
  return m;
}

Model load_model(const std::filesystem::path& dir, Heads heads, uint64_t seed) {
  std::error_code ec;
  check(std::filesystem::is_directory(dir, ec), "model directory {} does not exist", dir.string());
  Model m = init_model(load_config(dir / "config.json"), heads, seed);
  auto weights = dir / "model.safetensors";
  // Anything there but a missing file (a symlink loop, a directory) is reported by the reader.
  if (std::filesystem::exists(std::filesystem::symlink_status(weights, ec))) {
    m.unused_tensors = load_hf_weights(m.params, SafetensorsFile(weights));
    m.from_checkpoint = true;
  }
  return m;
}

namespace {

std::vector<std::vector<int64_t>> int_matrix(const nlohmann::json& j, const char* field,
                                             const std::string& origin) {
  const auto& v = j.at(field);
  check(v.is_array() && !v.empty(), "{}: field '{}' must be a non-empty list of lists", origin,
        field);
  std::vector<std::vector<int64_t>> rows;
  for (size_t r = 0; r < v.size(); ++r) {
    check(v[r].is_array(), "{}: {}[{}] must be a list of integers", origin, field, r);
    std::vector<int64_t> row;
    for (size_t c = 0; c < v[r].size(); ++c) {
      check(v[r][c].is_number_integer(), "{}: {}[{}][{}] must be an integer, got {}", origin,
            field, r, c, v[r][c].dump());
      row.push_back(v[r][c].get<int64_t>());
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

BertInputs inputs_from_json(const nlohmann::json& j, const std::string& origin) {
  check(j.is_object(), "{}: expected a JSON object with input_ids", origin);
  check(j.contains("input_ids"), "{}: missing field 'input_ids'", origin);
  auto ids = int_matrix(j, "input_ids", origin);
  BertInputs in;
  in.batch = static_cast<int64_t>(ids.size());
  in.seq = static_cast<int64_t>(ids[0].size());
  check(in.seq > 0, "{}: input_ids[0] is empty", origin);
  auto flatten = [&](const char* field, const std::vector<std::vector<int64_t>>& m,
                     std::vector<int32_t>& out) {
    check(static_cast<int64_t>(m.size()) == in.batch, "{}: '{}' has {} rows, input_ids has {}",
          origin, field, m.size(), in.batch);
    for (size_t r = 0; r < m.size(); ++r) {
      check(static_cast<int64_t>(m[r].size()) == in.seq,
            "{}: {}[{}] has length {}, expected {} (all lists must have equal length)", origin,
            field, r, m[r].size(), in.seq);
      for (auto v : m[r]) {
        check(v >= INT32_MIN && v <= INT32_MAX, "{}: '{}' value {} does not fit int32", origin,
              field, v);
        out.push_back(static_cast<int32_t>(v));
      }
    }
  };
  flatten("input_ids", ids, in.input_ids);
  if (j.contains("token_type_ids"))
    flatten("token_type_ids", int_matrix(j, "token_type_ids", origin), in.token_type_ids);
  else
    in.token_type_ids.assign(ids.size() * in.seq, 0);
  if (j.contains("attention_mask"))
    flatten("attention_mask", int_matrix(j, "attention_mask", origin), in.attention_mask);
  else
    in.attention_mask.assign(ids.size() * in.seq, 1);
  return in;
}

void validate_inputs(const BertInputs& in, const BertConfig& c, const std::string& origin) {
  check(in.seq <= c.max_position_embeddings,
        "{}: sequence length {} exceeds max_position_embeddings {}", origin, in.seq,
        c.max_position_embeddings);
  for (int64_t i = 0; i < in.batch * in.seq; ++i) {
    int64_t r = i / in.seq, col = i % in.seq;
    check(in.input_ids[i] >= 0 && in.input_ids[i] < c.vocab_size,
          "{}: input_ids[{}][{}] = {} is outside the vocabulary [0, {})", origin, r, col,
          in.input_ids[i], c.vocab_size);
    check(in.token_type_ids[i] >= 0 && in.token_type_ids[i] < c.type_vocab_size,
          "{}: token_type_ids[{}][{}] = {} is outside [0, {})", origin, r, col,
          in.token_type_ids[i], c.type_vocab_size);
    check(in.attention_mask[i] == 0 || in.attention_mask[i] == 1,
          "{}: attention_mask[{}][{}] = {}, expected 0 or 1", origin, r, col,
          in.attention_mask[i]);
  }
}

int64_t BertInputs::masked_count() const {
  return std::count_if(masked_lm_labels.begin(), masked_lm_labels.end(),
                       [](int32_t l) { return l != -100; });
}

void set_dense_mlm_labels(BertInputs& in, const std::vector<int32_t>& dense, int64_t P,
                          const std::string& origin) {
  check(static_cast<int64_t>(dense.size()) == in.batch * in.seq,
        "{}: masked_lm_labels has {} values, expected {} x {}", origin, dense.size(), in.batch, in.seq);
  in.max_predictions = P;
  in.masked_lm_positions.assign(in.batch * P, 0);
  in.masked_lm_labels.assign(in.batch * P, -100);
  for (int64_t b = 0; b < in.batch; ++b) {
    int64_t slot = 0;
    for (int64_t s = 0; s < in.seq; ++s) {
      const int32_t label = dense[b * in.seq + s];
      if (label == -100) continue;
      check(slot < P, "{}: sequence {} has more than {} masked positions", origin, b, P);
      in.masked_lm_positions[b * P + slot] = static_cast<int32_t>(s);
      in.masked_lm_labels[b * P + slot] = label;
      ++slot;
    }
  }
}

void set_inputs(Executor& ex, const BertInputs& in) {
  const auto& g = ex.graph();
  const auto& shape = g.tensor(g.tensor_id("input_ids")).shape;
  check(shape == Shape{in.batch, in.seq}, "inputs are [{}, {}], the graph was built for {}",
        in.batch, in.seq, shape_str(shape));
  auto copy = [&](const std::string& name, const std::vector<int32_t>& values) {
    auto id = g.find_tensor(name);
    if (!id) return;
    check(static_cast<int64_t>(values.size()) == g.tensor(*id).numel(),
          "input '{}' has {} values, the graph expects {}", name, values.size(),
          shape_str(g.tensor(*id).shape));
    std::copy(values.begin(), values.end(), ex.input(name));
  };
  copy("input_ids", in.input_ids);
  copy("token_type_ids", in.token_type_ids);
  copy("attention_mask", in.attention_mask);
  copy("masked_lm_positions", in.masked_lm_positions);
  copy("masked_lm_labels", in.masked_lm_labels);
  copy("next_sentence_labels", in.next_sentence_labels);
}

}  // namespace bertlab

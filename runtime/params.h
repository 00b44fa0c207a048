#pragma once
// Parameters live in one flat fp32 arena (so the optimizer, checkpoints and the allreduce are
// one loop or one call); each weight tensor of the graph is a slice of it.
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/bert_config.h"
#include "base/buffer.h"
#include "runtime/graph.h"

namespace bertlab {

struct ParamInfo {
  std::string name;  // Hugging Face name (fused QKV: ...attention.self.qkv.weight)
  Shape shape;
  int64_t offset = 0;  // in floats, 16-float aligned
  int64_t numel() const { return bertlab::numel(shape); }
};

class ParamStore {
 public:
  ParamStore() = default;
  // One slice per weight tensor of the graph, in graph order.
  static ParamStore for_graph(const Graph& g);
  // Another arena with the same layout, zeroed (gradients, optimizer moments).
  static ParamStore like(const ParamStore& other);
  void zero();

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& info(const std::string& name) const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  float* data(const std::string& name) { return arena_.data() + info(name).offset; }
  const float* data(const std::string& name) const { return arena_.data() + info(name).offset; }
  float* arena() { return arena_.data(); }
  const float* arena() const { return arena_.data(); }
  int64_t arena_size() const { return static_cast<int64_t>(arena_.size()); }
  int64_t count() const;  // number of parameters (without alignment padding)

 private:
  std::vector<ParamInfo> params_;
  std::unordered_map<std::string, size_t> index_;
  AlignedBuffer<float> arena_;
};

// Initialises like BERT: weight matrices and embeddings from a normal distribution with std
// initializer_range truncated at two standard deviations, biases 0, layernorm gamma 1 and beta 0,
// the padding row of the word embeddings 0. Deterministic for a seed.
void init_bert_params(ParamStore& p, const BertConfig& c, uint64_t seed);

}  // namespace bertlab

#include "runtime/params.h"

#include <algorithm>
#include <random>

#include "base/error.h"

namespace bertlab {

ParamStore ParamStore::for_graph(const Graph& g) {
  ParamStore p;
  int64_t offset = 0;
  for (const auto& t : g.tensors()) {
    if (t.role != Role::weight) continue;
    check(t.dtype == DType::f32, "parameter '{}' must be f32 in the master copy", t.name);
    p.index_[t.name] = p.params_.size();
    p.params_.push_back({t.name, t.shape, offset});
    offset += (t.numel() + 15) / 16 * 16;
  }
  p.arena_ = AlignedBuffer<float>(static_cast<size_t>(offset));
  std::fill_n(p.arena_.data(), offset, 0.f);
  return p;
}

ParamStore ParamStore::like(const ParamStore& other) {
  ParamStore p;
  p.params_ = other.params_;
  p.index_ = other.index_;
  p.arena_ = AlignedBuffer<float>(other.arena_.size());
  p.zero();
  return p;
}

void ParamStore::zero() {
  float* d = arena_.data();
  const int64_t n = static_cast<int64_t>(arena_.size());
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = 0.f;
}

const ParamInfo& ParamStore::info(const std::string& name) const {
  auto it = index_.find(name);
  check(it != index_.end(), "model has no parameter named '{}'", name);
  return params_[it->second];
}

int64_t ParamStore::count() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.numel();
  return n;
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

void init_bert_params(ParamStore& p, const BertConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, static_cast<float>(c.initializer_range));
  const float limit = 2.f * static_cast<float>(c.initializer_range);
  for (const auto& info : p.params()) {
    float* d = p.data(info.name);
    const int64_t n = info.numel();
    if (ends_with(info.name, "LayerNorm.weight")) {
      std::fill_n(d, n, 1.f);
    } else if (info.shape.size() == 1) {
      std::fill_n(d, n, 0.f);  // biases and layernorm beta
    } else {
      for (int64_t i = 0; i < n; ++i) {
        float v;
        do v = normal(rng); while (std::abs(v) > limit);
        d[i] = v;
      }
    }
  }
  if (p.contains("bert.embeddings.word_embeddings.weight")) {
    float* row = p.data("bert.embeddings.word_embeddings.weight") + c.pad_token_id * c.hidden_size;
    std::fill_n(row, c.hidden_size, 0.f);
  }
}

}  // namespace bertlab

#include "runtime/recipe.h"

#include <cmath>

#include "base/error.h"

namespace bertlab {

double default_position_init_scale(const BertConfig& c) { return 2 * c.initializer_range; }

void init_positions_sinusoidal(ParamStore& params, const BertConfig& c, double amplitude) {
  const int64_t P = c.max_position_embeddings, H = c.hidden_size;
  check(params.info(kPositionTable).shape == Shape{P, H}, "{}: expected shape ({}, {})", kPositionTable, P, H);
  float* pe = params.data(kPositionTable);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < H; i += 2) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(i) / static_cast<double>(H));
      pe[p * H + i] = static_cast<float>(amplitude * std::sin(angle));
      if (i + 1 < H) pe[p * H + i + 1] = static_cast<float>(amplitude * std::cos(angle));
    }
}

std::vector<std::string> residual_branch_outputs(const BertConfig& c) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    for (const char* dense : {"attention.output.dense", "output.dense"})
      for (const char* part : {".weight", ".bias"}) names.push_back(fmt::format("bert.encoder.layer.{}.{}{}", i, dense, part));
  return names;
}

void scale_residual_branches(ParamStore& params, const BertConfig& c, double factor) {
  const auto f = static_cast<float>(factor);
  for (const auto& name : residual_branch_outputs(c)) {
    float* p = params.data(name);
    for (int64_t i = 0, n = params.info(name).numel(); i < n; ++i) p[i] *= f;
  }
}

}  // namespace bertlab

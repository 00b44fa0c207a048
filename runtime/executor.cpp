#include "runtime/executor.h"

#include <chrono>

#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/normalization.h"
#include "runtime/error.h"

namespace bertlab {

Executor::Executor(Graph graph, const ParamStore& params)
    : graph_(std::move(graph)), params_(params), plan_(plan_memory(graph_)) {
  arena_ = AlignedBuffer<std::byte>(static_cast<size_t>(plan_.arena_bytes));
  for (const auto& n : graph_.nodes()) steps_.push_back(make_step(n));
  repack_weights();
}

Executor::~Executor() = default;

void* Executor::buffer(int id) const {
  const auto& t = graph_.tensor(id);
  if (t.role == Role::weight) return const_cast<float*>(params_.data(t.name));
  check(plan_.offset[id] >= 0, "tensor '{}' has no buffer in the memory plan", t.name);
  return const_cast<std::byte*>(arena_.data()) + plan_.offset[id];
}

int32_t* Executor::input(const std::string& name) {
  int id = graph_.tensor_id(name);
  check(graph_.tensor(id).role == Role::input, "'{}' is not a graph input", name);
  return static_cast<int32_t*>(buffer(id));
}

const float* Executor::output(const std::string& name) const {
  for (const auto& [n, id] : graph_.outputs())
    if (n == name) return static_cast<const float*>(buffer(id));
  fail("graph has no output named '{}'", name);
}

Shape Executor::output_shape(const std::string& name) const {
  for (const auto& [n, id] : graph_.outputs())
    if (n == name) return graph_.tensor(id).shape;
  fail("graph has no output named '{}'", name);
}

const float* Executor::tensor_data(int id) const { return static_cast<const float*>(buffer(id)); }

void Executor::repack_weights() {
  for (auto& r : repackers_) r();
}

void Executor::run(std::vector<double>* node_seconds) {
  if (!node_seconds) {
    for (auto& s : steps_) s();
    return;
  }
  node_seconds->assign(steps_.size(), 0.0);
  using clock = std::chrono::steady_clock;
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto t0 = clock::now();
    steps_[i]();
    (*node_seconds)[i] = std::chrono::duration<double>(clock::now() - t0).count();
  }
}

std::function<void()> Executor::make_step(const Node& n) {
  auto in = [&](size_t i) { return static_cast<float*>(buffer(n.inputs.at(i))); };
  auto in_i32 = [&](size_t i) { return static_cast<const int32_t*>(buffer(n.inputs.at(i))); };
  auto shape = [&](size_t i) { return graph_.tensor(n.inputs.at(i)).shape; };
  float* out = static_cast<float*>(buffer(n.outputs.at(0)));
  const int64_t out_numel = graph_.tensor(n.outputs.at(0)).numel();

  switch (n.kind) {
    case OpKind::embedding: {
      auto s = shape(0);
      int64_t H = shape(2)[1];
      const int32_t *ids = in_i32(0), *types = in_i32(1);
      const float *word = in(2), *pos = in(3), *type = in(4);
      return [=] { ops::embedding_forward(out, ids, types, word, pos, type, s[0], s[1], H); };
    }
    case OpKind::mask_bias: {
      const int32_t* mask = in_i32(0);
      return [=] { ops::mask_bias_forward(out, mask, out_numel); };
    }
    case OpKind::linear: {
      auto gm = *node_gemm(graph_, n);
      bool residual = n.inputs.size() > 3;
      auto act = ops::activation_from_string(n.attrs.value("activation", "none"));
      auto lin = std::make_shared<ops::Linear>(gm.m, gm.n, gm.k, act, residual);
      packed_weight_bytes_ += lin->packed_bytes();
      const float *x = in(0), *w = in(1), *b = in(2), *r = residual ? in(3) : nullptr;
      repackers_.push_back([lin, w] { lin->pack_weights(w); });
      return [=] { lin->forward(out, x, b, r); };
    }
    case OpKind::attn_scores: {
      auto q = shape(0);
      int64_t heads = n.attrs.at("heads"), d = q[2] / 3 / heads;
      auto op = std::make_shared<ops::AttentionScores>(q[0], q[1], heads, d,
                                                       n.attrs.at("scale").get<float>());
      const float *qkv = in(0), *bias = in(1);
      return [=] { op->forward(out, qkv, bias); };
    }
    case OpKind::softmax: {
      auto s = shape(0);
      int64_t L = s.back();
      auto op = std::make_shared<ops::Softmax>(numel(s) / L, L);
      const float* x = in(0);
      return [=] { op->forward(out, x); };
    }
    case OpKind::attn_context: {
      auto q = shape(1);
      int64_t heads = n.attrs.at("heads"), d = q[2] / 3 / heads;
      auto op = std::make_shared<ops::AttentionContext>(q[0], q[1], heads, d);
      const float *p = in(0), *qkv = in(1);
      return [=] { op->forward(out, p, qkv); };
    }
    case OpKind::add: {
      const float *a = in(0), *b = in(1);
      return [=] { ops::add_forward(out, a, b, out_numel); };
    }
    case OpKind::layernorm: {
      auto s = shape(0);
      int64_t H = s.back();
      auto op = std::make_shared<ops::LayerNorm>(numel(s) / H, H, n.attrs.at("eps").get<float>());
      const float *x = in(0), *gamma = in(1), *beta = in(2);
      return [=] { op->forward(out, x, gamma, beta); };
    }
    case OpKind::gelu:
    case OpKind::tanh: {
      auto op = std::make_shared<ops::ActivationOp>(
          out_numel, n.kind == OpKind::gelu ? ops::Activation::gelu : ops::Activation::tanh);
      const float* x = in(0);
      return [=] { op->forward(out, x); };
    }
    case OpKind::first_token: {
      auto s = shape(0);
      const float* x = in(0);
      return [=] { ops::first_token_forward(out, x, s[0], s[1], s[2]); };
    }
  }
  fail("node '{}': op kind {} has no kernel", n.name, to_string(n.kind));
}

}  // namespace bertlab

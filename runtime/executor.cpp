#include "runtime/executor.h"

#include "runtime/grad_sync.h"

#include <atomic>
#include <chrono>
#include <omp.h>

#include "ops/isa.h"
#include "ops/peak.h"
#include "runtime/autodiff.h"
#include "base/error.h"

namespace bertlab {

namespace {
// The runs whose kernel reads inputs of one part while it writes outputs of another (the
// attention run, ops::FusedAttention: a block's context may land where another block's qkv or
// mask would otherwise be planned): the memory plan keeps their inputs live through the run.
// The pairs read each element before writing it and keep their own plan (element for element
// in place).
std::vector<uint8_t> planned_runs(const std::vector<uint8_t>& runs) {
  std::vector<uint8_t> planned(runs.size(), 1);
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i] == kFusedAttention)
      for (size_t k = 0; k < kFusedAttention; ++k) planned[i + k] = k == 0 ? kFusedAttention : 0;
  return planned;
}
}  // namespace

Executor::Executor(Graph graph, ParamStore& params, TrainingState* state)
    : graph_(std::move(graph)),
      params_(params),
      state_(state),
      runs_(fused_steps(graph_, omp_get_max_threads())),
      // A dropout writing bf16 probabilities does not run over its f32 input (bf16_probs_handoffs).
      plan_(plan_memory(graph_, 64, bf16_probs_handoffs(graph_), planned_runs(runs_))) {
  arena_ = AlignedBuffer<std::byte>(static_cast<size_t>(plan_.arena_bytes));
  // bf16 products need a native bf16 matmul; a bf16 allreduce (a compression of the gradients,
  // cast by bertlab's own kernels) runs anywhere.
  for (const auto& n : graph_.nodes())
    if (n.category == Category::gemm && gemm_bf16(n))
      check(ops::cpu_has_bf16(), "node '{}' multiplies in bf16, but {}; use --precision fp32", n.name,
            ops::bf16_unavailable_reason());
  share_dy_ = shared_dy_casts(graph_);
  shared_attn_ = shared_attention_casts(graph_);
  handoff_ = bf16_handoffs(graph_, training());
  kept_x_ = kept_x_casts(graph_);
  int attention_left = 0;  // nodes of the current attention run after its first
  for (const auto& n : graph_.nodes()) {
    check(state_ || n.phase == Phase::forward,
          "node '{}' is a {} node: training graphs need a TrainingState", n.name, to_string(n.phase));
    const size_t i = static_cast<size_t>(n.id);
    // The attention run is one step on its first node; its scores and probabilities have no
    // buffer (plan_memory), so their nodes get no kernels of their own.
    if (runs_[i] == kFusedAttention) {
      steps_.push_back(attention_step(n, graph_.node(n.id + kFusedAttention - 1)));
      attention_left = kFusedAttention - 1;
    } else if (attention_left > 0) {
      steps_.push_back([] {});
      --attention_left;
    } else {
      steps_.push_back(make_step(n));
    }
  }
  fuse_optimizer_steps();
  fuse_pairs();
  repack_weights();
}

Executor::~Executor() = default;

void* Executor::buffer(int id) const {
  const auto& t = graph_.tensor(id);
  switch (t.role) {
    case Role::weight:
      return params_.data(t.name);
    case Role::gradient:
      return state_->grads.data(param_of(t.name));
    case Role::optimizer_state:
      return t.name.rfind("exp_avg_sq:", 0) == 0 ? state_->exp_avg_sq.data(param_of(t.name))
                                                 : state_->exp_avg.data(param_of(t.name));
    default:
      check(plan_.offset[id] >= 0, "tensor '{}' has no buffer in the memory plan", t.name);
      return const_cast<std::byte*>(arena_.data()) + plan_.offset[id];
  }
}

int32_t* Executor::input(const std::string& name) {
  int id = graph_.tensor_id(name);
  check(graph_.tensor(id).role == Role::input, "'{}' is not a graph input", name);
  return static_cast<int32_t*>(buffer(id));
}

const float* Executor::output(const std::string& name) const {
  for (const auto& [n, id] : graph_.outputs())
    if (n == name) return f32(id);
  fail("graph has no output named '{}'", name);
}

Shape Executor::output_shape(const std::string& name) const {
  for (const auto& [n, id] : graph_.outputs())
    if (n == name) return graph_.tensor(id).shape;
  fail("graph has no output named '{}'", name);
}

int64_t Executor::kept_x_bytes() const {
  int64_t bytes = 0;
  for (const auto& [node, copy] : kept_x_copies_) bytes += static_cast<int64_t>(copy.size());
  return bytes;
}

uint64_t next_weights_version() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

void Executor::repack_weights() {
  for (auto& r : repackers_) r();
}

void Executor::run(std::vector<double>* node_seconds, unsigned phases) {
  if (node_seconds) node_seconds->assign(steps_.size(), 0.0);
  using clock = std::chrono::steady_clock;
  // Data parallel: the last micro-batch's backward starts gradient buckets as they are ready.
  GradientSync* sync = sync_ && (phases & kBackward) && context_.sync_gradients ? sync_.get() : nullptr;
  if (sync) sync->arm();
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Phase phase = graph_.node(i).phase;
    if (!(phases & (1u << static_cast<unsigned>(phase)))) continue;
    if (!node_seconds) {
      steps_[i]();
    } else {
      auto t0 = clock::now();
      steps_[i]();
      (*node_seconds)[i] = std::chrono::duration<double>(clock::now() - t0).count();
    }
    if (sync && phase == Phase::backward) sync->after_node(static_cast<int64_t>(i));
  }
}

}  // namespace bertlab

// The rules of the linear layer and its two gradient GEMMs (kernels in ops/matmul.h): the
// forward with its fused epilogue (bias, residual, activation), dX = dY W and dW = dY^T X.
#include "ops/matmul.h"

#include "base/error.h"
#include "runtime/differentiator.h"
#include "runtime/rules/common.h"
#include "runtime/step_binder.h"

namespace bertlab::rules::linear {

namespace {

int64_t rows(const Shape& s) { return numel(s) / s.back(); }

// A weight as one GEMM reads it (packed, or cast to bf16), kept across the micro-batches of an
// optimizer step: remade when StepContext::weights_version moves, allocated on first use (the
// executor's kept_weight_bytes() counts it then).
class KeptWeight {
 public:
  KeptWeight(int64_t bytes, int64_t* total_bytes) : bytes_(bytes), total_bytes_(total_bytes) {}
  template <class Make>
  const void* get(uint64_t version, const Make& make) {
    if (copy_.size() == 0) {
      copy_ = AlignedBuffer<std::byte>(static_cast<size_t>(bytes_));
      *total_bytes_ += bytes_;
    }
    if (version != version_) {
      make(copy_.data());
      version_ = version;
    }
    return copy_.data();
  }

 private:
  int64_t bytes_;
  int64_t* total_bytes_;
  uint64_t version_ = 0;  // 0: never made (weights_version 0 never reaches get())
  AlignedBuffer<std::byte> copy_;
};

// linear: x(...,K), w(N,K), b(N) [, residual(...,N)] -> (...,N); attr activation (epilogue)
OutputTypes linear_outputs(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 0);
  const auto& w = in_shape(g, n, 1);
  const auto& b = in_shape(g, n, 2);
  expect_rank(n, w, 2, "weight");
  check(!x.empty() && x.back() == w[1], "node '{}': input {} does not match weight {} (N x K)", n.name,
        shape_str(x), shape_str(w));
  check(b == Shape{w[0]}, "node '{}': bias {} does not match weight {}", n.name, shape_str(b), shape_str(w));
  Shape y = x;
  y.back() = w[0];
  if (n.inputs.size() > 3)
    check(in_shape(g, n, 3) == y, "node '{}': residual {} does not match output {}", n.name,
          shape_str(in_shape(g, n, 3)), shape_str(y));
  return f32({y});
}
GemmShape linear_gemm(const Graph& g, const Node& n) {
  const auto& x = in_shape(g, n, 0);
  const auto& w = in_shape(g, n, 1);
  return GemmShape{1, rows(x), w[0], w[1], false, true, GemmRole::dense};
}
double linear_flops(const Graph& g, const Node& n) {
  // GEMM, bias add, optional residual add, optional fused activation.
  const double out = out0_numel(g, n);
  double f = linear_gemm(g, n).flops() + out;
  if (n.inputs.size() > 3) f += out;
  return f + out * ops::activation_info(activation_of(n)).forward_flops;
}
void linear_backward(Differentiator& d, const Node& n, int dy) {
  const auto& in = n.inputs;
  const std::string& name = n.name;
  check(activation_of(n) == ops::Activation::none,
        "node '{}': a linear with a fused activation has no backward rule; differentiate "
        "before fusing", name);
  d.contribute(in[0], d.emit1(OpKind::linear_grad_input, name + ".grad_input", {dy, in[1]}));
  d.emit(OpKind::linear_grad_weight, name + ".grad_weight", {dy, d.saved(in[0])},
         {d.param_grad(in[1]), d.param_grad(in[2])});
  if (in.size() > 3) d.contribute(in[3], dy);  // fused residual
}
std::function<void()> linear_kernel(StepBinder& b, const Node& n) {
  auto gm = linear_gemm(b.graph(), n);
  const bool residual = n.inputs.size() > 3;
  const auto act = activation_of(n);
  // Training packs each weight before its GEMM into one scratch buffer, except a large one
  // (gemm_b_packed).
  const bool pack = !b.training() || gemm_b_packed(b.graph(), n);
  const ops::LinearBf16Io io{b.handed_off(n.inputs[0]), b.handed_off(n.outputs[0])};
  auto lin = std::make_shared<ops::Linear>(gm.m, gm.n, gm.k, act, residual, pack, gemm_bf16(n), io);
  float *y = b.f32(n.outputs[0]), *x = b.f32(n.inputs[0]), *w = b.f32(n.inputs[1]), *bias = b.f32(n.inputs[2]);
  float* r = residual ? b.f32(n.inputs[3]) : nullptr;
  if (!b.training()) {
    b.add_packed_weight_bytes(lin->packed_bytes());
    b.add_repacker([lin, w] { lin->pack_weights(w); });
    return [=] { lin->forward(y, x, bias, r); };
  }
  if (b.kept_x(n).role == KeptX::keeps) {  // bf16 x kept for the layer's dW GEMM
    auto& copy = b.keep_x_copy(n.id);
    copy = AlignedBuffer<std::byte>(lin->x_copy_bytes());
    lin->keep_x_in(copy.data());
  }
  if (lin->weights_in_place()) return [=] { lin->forward_packed(w, y, x, bias, r); };
  // Weights change every step: each call packs them just before the GEMM into the calling
  // thread's scratch (the large unpacked weight in bf16: casts them in forward_packed), or, with
  // a weights version, once per optimizer step into this GEMM's own copy.
  if (pack) b.need_packed_weight_bytes(lin->packed_bytes());
  auto kept = std::make_shared<KeptWeight>(lin->packed_bytes(), b.kept_weight_bytes());
  const StepContext* ctx = b.context();
  return [=] {
    if (ctx->weights_version) {
      const void* copy = kept->get(ctx->weights_version, [&](void* dst) { lin->pack_weights_into(w, dst); });
      return lin->forward_prepared(copy, y, x, bias, r);
    }
    if (!pack) return lin->forward_packed(w, y, x, bias, r);
    lin->forward_repacking(w, y, x, bias, r);
  };
}

// linear_grad_input: dy(...,N), w(N,K) -> dx(...,K) = dy w
OutputTypes linear_grad_input_outputs(const Graph& g, const Node& n) {
  const auto& dy = in_shape(g, n, 0);
  const auto& w = in_shape(g, n, 1);
  expect_rank(n, w, 2, "weight");
  check(!dy.empty() && dy.back() == w[0], "node '{}': gradient {} does not match weight {}", n.name,
        shape_str(dy), shape_str(w));
  Shape dx = dy;
  dx.back() = w[1];
  return f32({dx});
}
GemmShape linear_grad_input_gemm(const Graph& g, const Node& n) {  // dx(M,K) = dy(M,N) w(N,K)
  const auto& dy = in_shape(g, n, 0);
  const auto& w = in_shape(g, n, 1);
  return GemmShape{1, rows(dy), w[1], w[0], false, false, GemmRole::dense_grad_input};
}
double linear_grad_input_flops(const Graph& g, const Node& n) { return linear_grad_input_gemm(g, n).flops(); }
// dX = dY W, its weight copy made once per optimizer step under accumulation.
std::function<void()> linear_grad_input_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  StepContext* ctx = b.context();
  auto gm = linear_grad_input_gemm(b.graph(), n);
  auto op = std::make_shared<ops::LinearGradInput>(gm.m, gm.k, gm.n, gemm_bf16(n), b.shares_dy(n),
                                                   gemm_b_packed(b.graph(), n));
  const float *dy = b.in(n, 0), *w = b.in(n, 1);
  if (op->weight_copy_bytes() == 0) return [=] { op->forward(out, dy, w); };  // w in place
  // The weights' bf16 or packed copy, made on every call or once per optimizer step.
  auto kept = std::make_shared<KeptWeight>(static_cast<int64_t>(op->weight_copy_bytes()), b.kept_weight_bytes());
  return [=] {
    if (!ctx->weights_version) return op->forward(out, dy, w);
    op->forward_cast(out, dy, kept->get(ctx->weights_version, [&](void* dst) { op->cast_weights_into(w, dst); }));
  };
}

// linear_grad_weight: dy(...,N), x(...,K) -> dw(N,K) += dy^T x, db(N) += sum dy
OutputTypes linear_grad_weight_outputs(const Graph& g, const Node& n) {
  const auto& dy = in_shape(g, n, 0);
  const auto& x = in_shape(g, n, 1);
  check(dy.size() == x.size() && numel(dy) / dy.back() == numel(x) / x.back(),
        "node '{}': gradient {} and input {} have different rows", n.name, shape_str(dy), shape_str(x));
  return f32({{dy.back(), x.back()}, {dy.back()}});
}
GemmShape linear_grad_weight_gemm(const Graph& g, const Node& n) {  // dw(N,K) = dy^T(N,M) x(M,K)
  const auto& dy = in_shape(g, n, 0);
  const auto& x = in_shape(g, n, 1);
  return GemmShape{1, dy.back(), x.back(), rows(dy), true, false, GemmRole::dense_grad_weight};
}
double linear_grad_weight_flops(const Graph& g, const Node& n) {
  return linear_grad_weight_gemm(g, n).flops() + in0_numel(g, n);  // GEMM and the bias-gradient reduction
}
int64_t linear_grad_weight_bytes(const Graph& g, const Node& n) {  // dw and db are read and written (+=)
  return in_bytes(g, n, 0) + in_bytes(g, n, 1) + 2 * out_bytes(g, n, 0) + 2 * out_bytes(g, n, 1);
}
// dW, db, reading the forward's kept bf16 copy of X when there is one.
std::function<void()> linear_grad_weight_kernel(StepBinder& b, const Node& n) {
  float* out = b.out(n, 0);
  float* db = b.out(n, 1);
  auto gm = linear_grad_weight_gemm(b.graph(), n);  // m = N, n = K, k = M
  auto op = std::make_shared<ops::LinearGradWeight>(gm.k, gm.m, gm.n, gemm_bf16(n), b.shares_dy(n),
                                                    gemm_b_packed(b.graph(), n));
  const float *dy = b.in(n, 0), *x = b.in(n, 1);
  if (const KeptXCast& kept = b.kept_x(n); kept.role == KeptX::reads) {
    const auto& copy = b.kept_x_copy(kept.linear);
    check(copy.size() == op->x_copy_bytes(), "node '{}': the kept copy of x has {} bytes, not {}", n.name,
          copy.size(), op->x_copy_bytes());
    const std::byte* x_copy = copy.data();
    return [=] { op->forward_cast_x(out, db, dy, x_copy); };
  }
  return [=] { op->forward(out, db, dy, x); };
}

}  // namespace

const OpRules linear{linear_outputs, linear_flops, io_bytes, linear_gemm, linear_backward, linear_kernel};
const OpRules linear_grad_input{linear_grad_input_outputs, linear_grad_input_flops, io_bytes, linear_grad_input_gemm,
                                nullptr, linear_grad_input_kernel};
const OpRules linear_grad_weight{linear_grad_weight_outputs, linear_grad_weight_flops, linear_grad_weight_bytes,
                                 linear_grad_weight_gemm, nullptr, linear_grad_weight_kernel};

}  // namespace bertlab::rules::linear

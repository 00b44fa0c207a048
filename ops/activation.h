#pragma once
// Activation functions: one table. The graph attribute "activation", the element-wise kernels
// (ops/elementwise.h), the linear epilogue (ops/matmul.h), the references, the FLOP counts and
// the autodiff rule all read the row of an activation here; adding an activation is one row.
#include <array>
#include <cmath>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "base/enum_table.h"

namespace bertlab::ops {

// Columns of BERTLAB_ACTIVATIONS(X):
//   id       the enum value and the name in graphs and configs (Hugging Face's hidden_act)
//   fwd      oneDNN eltwise algorithm of the forward (and of the linear post-op)
//   bwd      oneDNN eltwise algorithm of the backward
//   alpha, beta  the algorithm's two parameters, as oneDNN defines them for it (swish: y =
//            x sigmoid(alpha x); the others here take none: 0)
//   rated    true: the kernel is vector compute, not bytes (erf, exp): `bertlab calibrate`
//            measures its forward and backward rates (ops/peak.h, elementwise kernels "<id>"
//            and "<id>_grad") and hwmodel's CPU model prices the node by them; false: priced
//            by bytes
//   from_y   true: the backward reads the output y (bwd is a *_use_dst_for_bwd algorithm);
//            false: it reads the input x
//   keep     true: autodiff keeps the output for backward nodes reading it; false: it
//            recomputes it from the input (cheap, and the forward copy dies early)
//   ff, bf   FLOPs per element of the forward and of the backward
//   ref      reference forward, y = f(x)
//   dref     reference derivative, from x (or from y when from_y)
#define BERTLAB_ACTIVATIONS(X)                                                                  \
  X(gelu, eltwise_gelu_erf, eltwise_gelu_erf, 0, 0, true, false, false, 5, 8, /* exact erf GELU */ \
    [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); },                    \
    [](double x) {                                                                              \
      return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +                                       \
             x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);                                \
    })                                                                                          \
  X(tanh, eltwise_tanh, eltwise_tanh_use_dst_for_bwd, 0, 0, false, true, true, 1, 3, /* 1 - y*y */ \
    [](double x) { return std::tanh(x); }, [](double y) { return 1.0 - y * y; })                \
  X(relu, eltwise_relu, eltwise_relu_use_dst_for_bwd, 0, 0, false, true, false, 1, 1, /* max(x, 0) */ \
    [](double x) { return x > 0 ? x : 0.0; }, [](double y) { return y > 0 ? 1.0 : 0.0; })      \
  /* SiLU (Hugging Face "silu"), oneDNN's swish at alpha 1: x sigmoid(x); exp, add, divide, */  \
  /* multiply per element forward; the backward s (1 + x (1 - s)) with s recomputed */         \
  X(silu, eltwise_swish, eltwise_swish, 1, 0, true, false, false, 4, 8,                          \
    [](double x) { return x / (1.0 + std::exp(-x)); },                                          \
    [](double x) {                                                                              \
      const double s = 1.0 / (1.0 + std::exp(-x));                                              \
      return s * (1.0 + x * (1.0 - s));                                                         \
    })

// none: no activation (a linear layer without an epilogue).
enum class Activation : uint8_t {
  none,
#define BERTLAB_ACTIVATION_ENUM(id, ...) id,
  BERTLAB_ACTIVATIONS(BERTLAB_ACTIVATION_ENUM)
#undef BERTLAB_ACTIVATION_ENUM
};

struct ActivationInfo {
  Activation act;
  const char* name;
  dnnl::algorithm forward_alg, backward_alg;
  float alpha, beta;  // the algorithms' parameters
  bool rated;         // calibrated rates price it (vector compute), else bytes
  bool grad_from_output;
  bool keep_output;
  double forward_flops, backward_flops;
  double (*reference)(double);
  double (*derivative)(double);
};

inline constexpr std::array kActivations{
    ActivationInfo{Activation::none, "none", dnnl::algorithm::undef, dnnl::algorithm::undef, 0, 0, false, false,
                   true, 0, 0, [](double x) { return x; }, [](double) { return 1.0; }},
#define BERTLAB_ACTIVATION_ROW(id, fwd, bwd, alpha, beta, rated, from_y, keep, ff, bf, ref, dref) \
  ActivationInfo{Activation::id, #id, dnnl::algorithm::fwd, dnnl::algorithm::bwd, alpha, beta,     \
                 rated, from_y, keep, ff, bf, ref, dref},
    BERTLAB_ACTIVATIONS(BERTLAB_ACTIVATION_ROW)
#undef BERTLAB_ACTIVATION_ROW
};

// Row i of the table describes the activation with value i.
constexpr bool activation_table_in_order() {
  for (size_t i = 0; i < kActivations.size(); ++i)
    if (static_cast<size_t>(kActivations[i].act) != i) return false;
  return true;
}
static_assert(activation_table_in_order(), "kActivations rows must follow the Activation enum");

inline const ActivationInfo& activation_info(Activation a) {
  return kActivations[static_cast<size_t>(a)];
}
// Activation's names are the table's (base/enum_table.h's templates use them).
constexpr auto enum_names(Activation) {
  std::array<const char*, kActivations.size()> names{};
  for (size_t i = 0; i < names.size(); ++i) names[i] = kActivations[i].name;
  return names;
}
inline const char* to_string(Activation a) { return enum_name(a); }
// Throws Error listing the known names.
inline Activation activation_from_string(const std::string& s) { return enum_from_string<Activation>(s, "activation"); }

}  // namespace bertlab::ops

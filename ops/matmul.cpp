#include "ops/matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <omp.h>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/buffer.h"
#include "ops/dnnl_context.h"
#include "ops/eigen_ref.h"
#include "ops/normalization.h"
#include "ops/parallel.h"
#include "base/error.h"

namespace bertlab::ops {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

std::string impl_of(const dnnl::primitive_desc_base& pd) { return pd.impl_info_str(); }

// bf16 attention inputs. heads: B*S rows of H floats `stride` apart (a third of qkv: 3H; ctx: H),
// copied head-major (B,heads,S,d) and read as the heads, or as their transposes (B,heads,d,S).
// Measured on BERT-base shapes (b8 s128, AMX), oneDNN's bf16 brgemm runs 10-30% faster on dense
// heads than on the heads of a (B,S,H) copy (row stride H); the cast costs the same either way.
AttentionBf16Input heads_bf16(int64_t B, int64_t S, int64_t heads, int64_t d, int64_t stride,
                              bool transposed, int slot) {
  const int64_t H = heads * d;
  memory::desc view = transposed ? memory::desc({B, heads, d, S}, dt::bf16, tag::abdc)
                                 : memory::desc({B, heads, S, d}, dt::bf16, tag::abcd);
  return {B * S, H, stride, slot, view, d, S};
}
// The primitive descriptor of `d` with the implementation named `like` (impl_info_str) when one
// of oneDNN's implementations for the problem has that name, else oneDNN's first choice.
dnnl::matmul::primitive_desc matmul_pd_like(const dnnl::matmul::desc& d, const dnnl::primitive_attr& attr,
                                            const std::string& like) {
  const auto& engine = dnnl_context().engine;
  dnnl::matmul::primitive_desc first(d, attr, engine);
  if (like.empty() || first.impl_info_str() == like) return first;
  dnnl::matmul::primitive_desc next(d, attr, engine);
  while (next.next_impl())
    if (next.impl_info_str() == like) return next;
  return first;
}
// scores: (B,heads,S,S), dense, or read transposed.
AttentionBf16Input scores_bf16(int64_t B, int64_t S, int64_t heads, bool transposed, int slot) {
  return {B * heads * S, S, S, slot, memory::desc({B, heads, S, S}, dt::bf16, transposed ? tag::abdc : tag::abcd)};
}
void reserve(const std::array<AttentionBf16Input, 2>& in) {
  for (const auto& i : in)
    if (i.source != Bf16Source::in_place) gemm_scratch(i.slot, size_t(i.rows * i.width) * sizeof(uint16_t));
}
// The matmul's two bf16 inputs from a and b (f32 rows, or bf16 rows for a `copy` source, or the
// bf16 data itself for `in_place`): the cast and copied ones converted in one parallel region;
// returns what the matmul reads (slot copies valid until the slots are written again).
std::pair<const void*, const void*> cast_inputs(const std::array<AttentionBf16Input, 2>& in, const void* a,
                                                const void* b) {
  std::array<const void*, 2> out{};
  std::array<Bf16Rows, 2> job{};
  int jobs = 0;
  for (size_t i = 0; i < 2; ++i) {
    const auto& x = in[i];
    const void* src = i == 0 ? a : b;
    if (x.source == Bf16Source::in_place) {
      out[i] = src;
      continue;
    }
    auto* dst = reinterpret_cast<uint16_t*>(gemm_scratch(x.slot, size_t(x.rows * x.width) * sizeof(uint16_t)));
    out[i] = dst;
    if (x.source == Bf16Source::cast)
      job[size_t(jobs++)] = {static_cast<const float*>(src), x.rows, x.width, x.stride, dst, x.head, x.seq};
    else if (x.source == Bf16Source::copy)
      job[size_t(jobs++)] = {nullptr, x.rows, x.width, x.stride, dst, x.head, x.seq, static_cast<const uint16_t*>(src)};
  }
  if (jobs == 2) cast_rows_to_bf16({job[0], job[1]});
  if (jobs == 1) cast_rows_to_bf16({job[0]});
  return {out[0], out[1]};
}
// `elems` elements past base: floats, or bf16 values when `bf16` (a handed-over qkv or context);
// F is float or const float.
template <typename F>
F* elements_past(F* base, int64_t elems, bool bf16) {
  using U = std::conditional_t<std::is_const_v<F>, const uint16_t, uint16_t>;
  return bf16 ? reinterpret_cast<F*>(reinterpret_cast<U*>(base) + elems) : base + elems;
}

}  // namespace

void linear_forward_reference(float* y, const float* x, const float* w, const float* b,
                              const float* residual, int64_t M, int64_t N, int64_t K,
                              Activation act) {
  ref::MatD acc = ref::load(x, M, K) * ref::load(w, N, K).transpose();  // x wᵀ
  if (b) acc.rowwise() += ref::load_row(b, N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float v = static_cast<float>(activation_info(act).reference(static_cast<float>(acc(i, j))));
      y[i * N + j] = residual ? v + residual[i * N + j] : v;
    }
}

Linear::Linear(int64_t M, int64_t N, int64_t K, Activation act, bool residual, bool packed,
               bool bf16, LinearBf16Io io)
    : M_(M), N_(N), K_(K), residual_(residual) {
  auto& ctx = dnnl_context();
  check(bf16 || (!io.x_bf16 && !io.y_bf16), "linear: bf16 input or output on an f32 GEMM");
  // A bf16 x is read in place, like an f32 view (no copy).
  x_ = io.x_bf16 ? GemmInput(memory::desc({M, K}, dt::bf16, tag::ab), false, 0)
                 : GemmInput(memory::desc({M, K}, dt::f32, tag::ab), bf16, 0);
  const memory::desc& src = x_.desc();
  // HF weights are (N,K) row-major, i.e. the (K,N) matrix in column-major order: tag "ba".
  memory::desc plain_w({K, N}, dt::f32, tag::ba);
  if (!packed) w_ = GemmInput(plain_w, bf16, 1);
  memory::desc wei_any = packed ? memory::desc({K, N}, src.data_type(), tag::any) : w_.desc();
  memory::desc bias({1, N}, dt::f32, tag::ab);
  memory::desc dst({M, N}, io.y_bf16 ? dt::bf16 : dt::f32, tag::ab);
  dnnl::post_ops po;
  if (act != Activation::none) {
    const ActivationInfo& a = activation_info(act);
    po.append_eltwise(1.f, a.forward_alg, a.alpha, a.beta);
  }
  if (residual) po.append_binary(dnnl::algorithm::binary_add, memory::desc({M, N}, dt::f32, tag::ab));
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei_any, bias, dst), scratchpad_attr(attr), ctx.engine);
  prim_ = dnnl::matmul(pd_);
  pack_pd_ = dnnl::reorder::primitive_desc(ctx.engine, plain_w, ctx.engine, pd_.weights_desc(), scratchpad_attr());
  pack_ = dnnl::reorder(pack_pd_);
}

void Linear::pack_weights(const float* w) {
  if (!packed_) packed_ = memory(pd_.weights_desc(), dnnl_context().engine);
  pack_weights_into(w, packed_.get_data_handle());
}

void Linear::pack_weights_into(const float* w, void* packed) const {
  pack_args_.execute(
      pack_, {{DNNL_ARG_FROM, pack_pd_.src_desc(), w}, {DNNL_ARG_TO, pd_.weights_desc(), packed}});
}

void Linear::forward(float* y, const float* x, const float* b, const float* residual) const {
  check(static_cast<bool>(packed_), "linear: forward() before pack_weights()");
  forward_packed(packed_.get_data_handle(), y, x, b, residual);
}

void Linear::forward_packed(const void* packed, float* y, const float* x, const float* b,
                            const float* residual) const {
  // Unpacked weights are the f32 HF array (converted on every call in bf16).
  forward_prepared(w_.desc().is_zero() ? packed : w_(static_cast<const float*>(packed)), y, x, b, residual);
}

void Linear::forward_repacking(const float* w, float* y, const float* x, const float* b,
                               const float* residual) const {
  check(w_.desc().is_zero(), "linear: forward_repacking() on unpacked weights");
  void* packed = gemm_scratch(1, static_cast<size_t>(packed_bytes()));
  pack_weights_into(w, packed);
  forward_prepared(packed, y, x, b, residual);
}

void Linear::keep_x_in(void* copy) {
  check(x_.copy_bytes() > 0, "linear: keep_x_in() on an input that is read in place");
  keep_x_ = copy;
}

void Linear::forward_prepared(const void* wei, float* y, const float* x, const float* b,
                              const float* residual) const {
  if (keep_x_) x_.convert_into(x, keep_x_);
  const void* src = keep_x_ ? keep_x_ : x_(x);
  args_.bind({{DNNL_ARG_SRC, pd_.src_desc(), src},
              {DNNL_ARG_WEIGHTS, pd_.weights_desc(), wei},
              {DNNL_ARG_BIAS, pd_.bias_desc(), b},
              {DNNL_ARG_DST, pd_.dst_desc(), y}});
  if (residual_) {
    check(residual != nullptr, "linear built with a residual input was called without one");
    // The residual is the src1 of the last post-op (binary add).
    const int po_index = pd_.get_primitive_attr().get_post_ops().len() - 1;
    const int arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(po_index) | DNNL_ARG_SRC_1;
    args_.bind({{arg, pd_.query_md(dnnl::query::exec_arg_md, arg), residual}});
  }
  args_.execute(prim_, {});
}

std::string Linear::impl_name() const { return impl_of(pd_); }

void attn_scores_reference(float* scores, const float* qkv, const float* mask_bias, int64_t B,
                           int64_t S, int64_t heads, int64_t d, float scale) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const float* base = qkv + b * S * row + h * d;
      ref::MatD q = ref::load(base, S, d, row), k = ref::load(base + H, S, d, row);
      ref::MatF s = (q * k.transpose() * double(scale)).cast<float>();  // Q Kᵀ · scale
      s.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(mask_bias + b * S, S);
      Eigen::Map<ref::MatF>(scores + (b * heads + h) * S * S, S, S) = s;
    }
}

void attn_context_reference(float* ctx, const float* probs, const float* qkv, int64_t B, int64_t S,
                            int64_t heads, int64_t d) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      ref::MatD p = ref::load(probs + (b * heads + h) * S * S, S, S);
      ref::MatD v = ref::load(qkv + b * S * row + 2 * H + h * d, S, d, row);
      ref::store(ctx + b * S * H + h * d, p * v, H);  // P V, heads side by side
    }
}

// Q, K and V are strided views of qkv (B,S,3,heads,d): in f32 no copies, the matmul reads in
// place; in bf16 each is cast into a dense head-major copy (AttentionBf16Input).
AttentionScores::AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale,
                                 bool bf16, bool qkv_bf16, int64_t all_heads, const std::array<std::string, 2>& like)
    : AttentionScores(B, S, heads, d, scale, bf16, qkv_bf16, all_heads, like, true) {}

std::array<std::string, 2> AttentionScores::impls(int64_t B, int64_t S, int64_t heads, int64_t d, float scale,
                                                  bool bf16, bool qkv_bf16) {
  const AttentionScores descs(B, S, heads, d, scale, bf16, qkv_bf16, 0, {}, false);
  return {descs.pd_.impl_info_str(), descs.unmasked_pd_.impl_info_str()};
}

AttentionScores::AttentionScores(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16,
                                 bool qkv_bf16, int64_t all_heads, const std::array<std::string, 2>& like, bool build)
    : B_(B), S_(S), H_(std::max(all_heads, heads) * d), bf16_(bf16) {
  check(bf16 || !qkv_bf16, "attention scores: a bf16 qkv needs bf16 products");
  const int64_t H = H_, row = 3 * H;
  memory::desc q({B, heads, S, d}, dt::f32, memory::dims{S * row, d, row, 1});
  memory::desc kt({B, heads, d, S}, dt::f32, memory::dims{S * row, d, 1, row});
  if (bf16) {
    // The slots the backward's dQ and dK GEMMs may read these copies from (AttentionGrad).
    in16_ = {heads_bf16(B, S, heads, d, row, false, kQSlot), heads_bf16(B, S, heads, d, row, true, kKSlot)};
    if (qkv_bf16) in16_[0].source = in16_[1].source = Bf16Source::copy;
    if (build) reserve(in16_);
    q = in16_[0].view, kt = in16_[1].view;
  }
  memory::desc dst({B, heads, S, S}, dt::f32, tag::abcd);
  memory::desc bias({B, 1, 1, S}, dt::f32, tag::abcd);
  dnnl::primitive_attr attr;
  attr.set_output_scales(0, {scale});
  unmasked_pd_ = matmul_pd_like(dnnl::matmul::desc(q, kt, dst), scratchpad_attr(attr), like[1]);
  dnnl::post_ops po;
  po.append_binary(dnnl::algorithm::binary_add, bias);
  attr.set_post_ops(po);
  pd_ = matmul_pd_like(dnnl::matmul::desc(q, kt, dst), scratchpad_attr(attr), like[0]);
  if (!build) return;
  unmasked_ = dnnl::matmul(unmasked_pd_);
  prim_ = dnnl::matmul(pd_);
}

void AttentionScores::forward(float* scores, const float* qkv, const float* mask_bias) const {
  std::pair<const void*, const void*> in{qkv, qkv + H_};  // K: after the H columns of Q
  if (bf16_) in = cast_inputs(in16_, qkv, elements_past(qkv, H_, in16_[1].source == Bf16Source::copy));
  if (std::all_of(mask_bias, mask_bias + B_ * S_, [](float v) { return v == 0.f; })) {
    unmasked_args_.execute(unmasked_, {{DNNL_ARG_SRC, unmasked_pd_.src_desc(), in.first},
                                       {DNNL_ARG_WEIGHTS, unmasked_pd_.weights_desc(), in.second},
                                       {DNNL_ARG_DST, unmasked_pd_.dst_desc(), scores}});
    return;
  }
  args_.execute(
      prim_,
      {{DNNL_ARG_SRC, pd_.src_desc(), in.first},
       {DNNL_ARG_WEIGHTS, pd_.weights_desc(), in.second},
       {DNNL_ARG_DST, pd_.dst_desc(), scores},
       {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
        pd_.query_md(dnnl::query::exec_arg_md, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1),
        mask_bias}});
}

std::string AttentionScores::impl_name() const { return impl_of(pd_); }

AttentionContext::AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16, bool y_bf16,
                                   bool qkv_bf16, bool probs_bf16, int64_t all_heads, const std::string& like)
    : AttentionContext(B, S, heads, d, bf16, y_bf16, qkv_bf16, probs_bf16, all_heads, like, true) {}

std::string AttentionContext::impl(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16, bool y_bf16,
                                   bool qkv_bf16) {
  return AttentionContext(B, S, heads, d, bf16, y_bf16, qkv_bf16, false, 0, {}, false).pd_.impl_info_str();
}

AttentionContext::AttentionContext(int64_t B, int64_t S, int64_t heads, int64_t d, bool bf16, bool y_bf16,
                                   bool qkv_bf16, bool probs_bf16, int64_t all_heads, const std::string& like,
                                   bool build)
    : H_(std::max(all_heads, heads) * d), bf16_(bf16) {
  check(bf16 || (!y_bf16 && !qkv_bf16 && !probs_bf16), "attention context: bf16 operands need bf16 products");
  const int64_t H = H_, row = 3 * H;
  memory::desc p({B, heads, S, S}, dt::f32, tag::abcd);
  memory::desc v({B, heads, S, d}, dt::f32, memory::dims{S * row, d, row, 1});
  if (bf16) {
    in16_ = {scores_bf16(B, S, heads, false, 0), heads_bf16(B, S, heads, d, row, false, 1)};
    if (probs_bf16) in16_[0].source = Bf16Source::in_place;
    if (qkv_bf16) in16_[1].source = Bf16Source::copy;
    if (build) reserve(in16_);
    p = in16_[0].view, v = in16_[1].view;
  }
  memory::desc dst({B, heads, S, d}, y_bf16 ? dt::bf16 : dt::f32, memory::dims{S * H, d, H, 1});
  pd_ = matmul_pd_like(dnnl::matmul::desc(p, v, dst), scratchpad_attr(), like);
  if (!like.empty() && pd_.impl_info_str() != like) {
    // Some kernels take a dense destination only (oneDNN 2.6's bf16 brgemm on AVX-512, for one
    // head of one sequence): write there, then copy the rows into ctx (B,S,H).
    memory::desc dense({B, heads, S, d}, dst.data_type(), tag::abcd);
    auto with_dense = matmul_pd_like(dnnl::matmul::desc(p, v, dense), scratchpad_attr(), like);
    if (with_dense.impl_info_str() == like) {
      pd_ = with_dense;
      dense_dst_.resize(dense.get_size());
    }
  }
  if (build) prim_ = dnnl::matmul(pd_);
}

void AttentionContext::forward(float* out, const float* probs, const float* qkv) const {
  std::pair<const void*, const void*> in{probs, qkv + 2 * H_};  // V: after Q and K
  if (bf16_) in = cast_inputs(in16_, probs, elements_past(qkv, 2 * H_, in16_[1].source == Bf16Source::copy));
  void* dst = dense_dst_.empty() ? static_cast<void*>(out) : static_cast<void*>(dense_dst_.data());
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), in.first},
                        {DNNL_ARG_WEIGHTS, pd_.weights_desc(), in.second},
                        {DNNL_ARG_DST, pd_.dst_desc(), dst}});
  if (dense_dst_.empty()) return;
  // (B,heads,S,d) dense -> ctx, element (b,h,s,j) at b*S*H + s*H + h*d + j.
  const memory::dims dims = pd_.dst_desc().dims();
  const int64_t B = dims[0], heads = dims[1], S = dims[2], d = dims[3];
  const size_t e = dense_dst_.size() / static_cast<size_t>(B * heads * S * d);  // bytes per element
  auto* to = reinterpret_cast<std::byte*>(out);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < S; ++s)
        std::memcpy(to + static_cast<size_t>(b * S * H_ + s * H_ + h * d) * e,
                    dense_dst_.data() + static_cast<size_t>(((b * heads + h) * S + s) * d) * e, static_cast<size_t>(d) * e);
}

std::string AttentionContext::impl_name() const { return impl_of(pd_); }

// One thread's kernels for one block of heads of one sequence.
struct FusedAttention::PerThread {
  AttentionScores scores;
  Softmax softmax;
  AttentionContext context;
  PerThread(int64_t S, int64_t hb, int64_t heads, int64_t d, float scale, bool bf16, bool qkv_bf16, bool y_bf16,
            const std::array<std::string, 2>& scores_like, const std::string& context_like)
      : scores(1, S, hb, d, scale, bf16, qkv_bf16, heads, scores_like),
        softmax(hb * S, S),
        context(1, S, hb, d, bf16, y_bf16, qkv_bf16, false, heads, context_like) {}
};

namespace {
// The calling thread's probabilities of one block, shared by every FusedAttention (the layers
// run one after another), grown to the largest block.
float* block_probs(int64_t floats) {
  thread_local AlignedBuffer<float> probs;
  if (probs.size() < static_cast<size_t>(floats)) probs = AlignedBuffer<float>(static_cast<size_t>(floats));
  return probs.data();
}
}  // namespace

FusedAttention::FusedAttention(int64_t B, int64_t S, int64_t heads, int64_t d, float scale, bool bf16,
                               bool qkv_bf16, bool y_bf16, int threads)
    : B_(B), S_(S), heads_(heads), d_(d), hb_(1), qkv_bf16_(qkv_bf16), y_bf16_(y_bf16) {
  check(B > 0 && S > 0 && heads > 0 && d > 0 && threads > 0, "fused attention: bad sizes");
  // The most heads per block (a divisor of heads) whose probabilities fit kBlockBytes and whose
  // blocks keep every thread busy to the end (a multiple of the threads, or at least four
  // blocks per thread); one head per block if none does.
  for (int64_t hb = heads; hb > 1; --hb) {
    const int64_t blocks = B * (heads / hb);
    if (heads % hb == 0 && hb * S * S * int64_t{sizeof(float)} <= kBlockBytes &&
        (blocks % threads == 0 || blocks >= 4 * threads)) {
      hb_ = hb;
      break;
    }
  }
  // The kernels the whole batch's products get, for the blocks' products to take the same.
  const auto scores_like = AttentionScores::impls(B, S, heads, d, scale, bf16, qkv_bf16);
  const std::string context_like = AttentionContext::impl(B, S, heads, d, bf16, y_bf16, qkv_bf16);
  for (int t = 0; t < threads; ++t)
    per_thread_.push_back(
        std::make_unique<PerThread>(S, hb_, heads, d, scale, bf16, qkv_bf16, y_bf16, scores_like, context_like));
}

FusedAttention::~FusedAttention() = default;

void FusedAttention::forward(float* ctx, const float* qkv, const float* mask_bias) const {
  const int64_t H = heads_ * d_, per_seq = heads_ / hb_, blocks = B_ * per_seq;
  // Each thread runs its blocks' primitives on itself (oneDNN runs single-threaded inside a
  // parallel region), on its own kernels, scratch slots and stream.
#pragma omp parallel num_threads(static_cast<int>(per_thread_.size()))
  {
    PerThread& w = *per_thread_[static_cast<size_t>(omp_get_thread_num())];
    float* probs = block_probs(hb_ * S_ * S_);
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t b = blk / per_seq, h0 = (blk % per_seq) * hb_;
      const float* q = elements_past(qkv, b * S_ * 3 * H + h0 * d_, qkv_bf16_);  // V follows at 2H
      w.scores.forward(probs, q, mask_bias + b * S_);
      w.softmax.forward(probs, probs);
      w.context.forward(elements_past(ctx, b * S_ * H + h0 * d_, y_bf16_), probs, q);
    }
  }
}

}  // namespace bertlab::ops

namespace bertlab::ops {

void linear_grad_input_reference(float* dx, const float* dy, const float* w, int64_t M, int64_t N,
                                 int64_t K) {
  ref::store(dx, ref::load(dy, M, N) * ref::load(w, N, K), K);  // dX = dY W
}

void linear_grad_weight_reference(float* dw, float* db, const float* dy, const float* x, int64_t M,
                                  int64_t N, int64_t K) {
  ref::MatD g = ref::load(dy, M, N);
  ref::accumulate(dw, g.transpose() * ref::load(x, M, K), K);  // dW += dYᵀ X
  ref::accumulate(db, g.colwise().sum(), N);                   // db += Σ_rows dY
}

LinearGradInput::LinearGradInput(int64_t M, int64_t N, int64_t K, bool bf16, bool share_dy, bool pack_w)
    : M_(M), N_(N), share_dy_(bf16 && share_dy) {
  auto& ctx = dnnl_context();
  dy_ = GemmInput(memory::desc({M, N}, dt::f32, tag::ab), bf16, share_dy ? kSharedDySlot : 0);
  w_ = GemmInput(memory::desc({N, K}, dt::f32, tag::ab), bf16, 1, pack_w);
  memory::desc dx({M, K}, dt::f32, tag::ab);
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_.desc(), w_.desc(), dx), scratchpad_attr(), ctx.engine);
  prim_ = dnnl::matmul(pd_);
  if (pack_w) w_.choose(pd_.weights_desc());
}

void LinearGradInput::forward(float* dx, const float* dy, const float* w) const {
  forward_cast(dx, dy, w_(w));
}

void LinearGradInput::forward_cast(float* dx, const float* dy, const void* w_copy) const {
  const void* a;
  if (share_dy_) {  // the cast (to dy_'s dense layout) with the column sums for the dW GEMM
    auto* copy = reinterpret_cast<uint16_t*>(gemm_scratch(kSharedDySlot, dy_.copy_bytes()));
    cast_rows_summing_columns(copy, dy, M_, N_, shared_dy_sums());
    a = copy;
  } else {
    a = dy_(dy);
  }
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), a},
                        {DNNL_ARG_WEIGHTS, pd_.weights_desc(), w_copy},
                        {DNNL_ARG_DST, pd_.dst_desc(), dx}});
}

std::string LinearGradInput::impl_name() const { return impl_of(pd_); }

LinearGradWeight::LinearGradWeight(int64_t M, int64_t N, int64_t K, bool bf16, bool share_dy, bool pack_x)
    : M_(M), N_(N), share_dy_(bf16 && share_dy) {
  auto& ctx = dnnl_context();
  // dy^T, a strided view. Its dense bf16 copy keeps dy's element order, so it is byte for byte
  // the copy LinearGradInput makes of dy (M,N), which share_dy reads.
  dy_t_ = GemmInput(memory::desc({N, M}, dt::f32, memory::dims{1, N}), bf16, share_dy_ ? kSharedDySlot : 0);
  x_ = GemmInput(memory::desc({M, K}, dt::f32, tag::ab), bf16, 1, pack_x);
  const memory::desc &dy_t = dy_t_.desc(), &x = x_.desc();
  memory::desc dw({N, K}, dt::f32, tag::ab);
  dnnl::post_ops po;
  po.append_sum(1.f);  // accumulate into the gradient
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_t, x, dw), scratchpad_attr(attr), ctx.engine);
  prim_ = dnnl::matmul(pd_);
  if (pack_x) x_.choose(pd_.weights_desc());
}

void LinearGradWeight::forward(float* dw, float* db, const float* dy, const float* x) const {
  forward_cast_x(dw, db, dy, x_(x));
}

void LinearGradWeight::forward_cast_x(float* dw, float* db, const float* dy, const void* x_copy) const {
  const void* dy_t = share_dy_ ? gemm_scratch(kSharedDySlot, dy_t_.copy_bytes()) : dy_t_(dy);
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), dy_t},
                        {DNNL_ARG_WEIGHTS, pd_.weights_desc(), x_copy},
                        {DNNL_ARG_DST, pd_.dst_desc(), dw}});
  // Column sums of dy: each thread sums a block of rows, then the partial sums are added (with
  // share_dy the dX GEMM's cast summed them).
  const int64_t M = M_, N = N_;
  auto fold = [&](const float* part) {
    for (int64_t j = 0; j < N; ++j) db[j] += part[j];
  };
  if (share_dy_) {
    const SharedDySums& sums = shared_dy_sums();
    check(sums.rows == M && sums.width == N, "linear_grad_weight: the shared column sums are of a ({}, {}) dy, not ({}, {})",
          sums.rows, sums.width, M, N);
    return fold_row_sum_parts(sums.used, N, sums.parts, fold);
  }
  ordered_row_sums(
      M, N, partials_,
      [&](int64_t begin, int64_t end, float* part) {
        for (int64_t i = begin; i < end; ++i) add_row(part, dy + i * N, N);
      },
      fold);
}

std::string LinearGradWeight::impl_name() const { return impl_of(pd_); }

void attn_scores_grad_reference(float* dqkv, const float* dscores, const float* qkv, int64_t B,
                                int64_t S, int64_t heads, int64_t d, float scale, QkvSlot slot) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      ref::MatD ds = ref::load(dscores + (b * heads + h) * S * S, S, S);
      const float* base = qkv + b * S * row + h * d;
      float* out = dqkv + b * S * row + h * d;
      if (slot == QkvSlot::q)  // dQ = dS K · scale
        ref::store(out, ds * ref::load(base + H, S, d, row) * double(scale), row);
      else  // dK = dSᵀ Q · scale
        ref::store(out + H, ds.transpose() * ref::load(base, S, d, row) * double(scale), row);
    }
}

void attn_context_grad_probs_reference(float* dprobs, const float* dctx, const float* qkv,
                                       int64_t B, int64_t S, int64_t heads, int64_t d) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      ref::MatD dc = ref::load(dctx + b * S * H + h * d, S, d, H);
      ref::MatD v = ref::load(qkv + b * S * row + 2 * H + h * d, S, d, row);
      ref::store(dprobs + (b * heads + h) * S * S, dc * v.transpose(), S);  // dP = dC Vᵀ
    }
}

void attn_context_grad_v_reference(float* dqkv, const float* dctx, const float* probs, int64_t B,
                                   int64_t S, int64_t heads, int64_t d) {
  const int64_t H = heads * d, row = 3 * H;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      ref::MatD p = ref::load(probs + (b * heads + h) * S * S, S, S);
      ref::MatD dc = ref::load(dctx + b * S * H + h * d, S, d, H);
      ref::store(dqkv + b * S * row + 2 * H + h * d, p.transpose() * dc, row);  // dV = Pᵀ dC
    }
}

AttentionGrad::AttentionGrad(Kind kind, int64_t B, int64_t S, int64_t heads, int64_t d, float scale,
                             bool bf16, unsigned reuse, bool probs_bf16)
    : kind_(kind), B_(B), S_(S), H_(heads * d), heads_(heads), bf16_(bf16) {
  check(reuse < 4, "attention backward: bad reuse mask {}", reuse);
  check(!probs_bf16 || (bf16 && kind == Kind::context_v), "attention backward: bf16 probabilities need bf16 dV");
  auto& ctx = dnnl_context();
  const int64_t H = heads * d, row = 3 * H;
  // Views: a head of qkv/dqkv (B,heads,S,d), its transpose (B,heads,d,S), a head of ctx/dctx,
  // the scores (B,heads,S,S) and their transpose.
  memory::desc head({B, heads, S, d}, dt::f32, memory::dims{S * row, d, row, 1});
  memory::desc head_t({B, heads, d, S}, dt::f32, memory::dims{S * row, d, 1, row});
  memory::desc ctx_head({B, heads, S, d}, dt::f32, memory::dims{S * H, d, H, 1});
  memory::desc scores({B, heads, S, S}, dt::f32, tag::abcd);
  memory::desc scores_t({B, heads, S, S}, dt::f32, memory::dims{heads * S * S, S * S, 1, S});
  dnnl::primitive_attr attr;
  memory::desc src, wei, dst;
  switch (kind) {
    case Kind::scores_q:  // dQ = dS K
    case Kind::scores_k:  // dK = dS^T Q
      src = kind == Kind::scores_q ? scores : scores_t, wei = head, dst = head;
      attr.set_output_scales(0, {scale});
      // K (dQ) and Q (dK): AttentionScores' copies, read as they are or transposed.
      if (bf16)
        in16_ = {scores_bf16(B, S, heads, kind == Kind::scores_k, 0),
                 heads_bf16(B, S, heads, d, row, false, kind == Kind::scores_q ? kKSlot : kQSlot)};
      break;
    case Kind::context_probs:  // dP = dctx V^T
      src = ctx_head, wei = head_t, dst = scores;
      if (bf16) in16_ = {heads_bf16(B, S, heads, d, H, false, 0), heads_bf16(B, S, heads, d, row, true, 1)};
      break;
    case Kind::context_v:  // dV = P^T dctx; dctx in slot 0, where context_probs casts it
      src = scores_t, wei = ctx_head, dst = head;
      if (bf16) in16_ = {scores_bf16(B, S, heads, true, 1), heads_bf16(B, S, heads, d, H, false, 0)};
      break;
  }
  if (bf16) {
    // in16_ is (src, wei): (a, b) of forward(), but (b, a) for context_v (dV = P^T dctx).
    const bool swapped = kind == Kind::context_v;
    for (unsigned i = 0; i < 2; ++i)
      if (reuse & (1u << i)) in16_[swapped ? 1 - i : i].source = Bf16Source::reused;
    if (probs_bf16) in16_[0].source = Bf16Source::in_place;  // P^T, from b
    reserve(in16_);
    src = in16_[0].view, wei = in16_[1].view;
    // oneDNN's bf16 kernels do not write a head of dqkv (row stride 3H) in place (they fall back
    // to a slow GEMM): the product goes to a dense head-major (B,heads,S,d) buffer (the fastest
    // output layout measured, as for the inputs), then is copied into its third.
    if (kind != Kind::context_probs) {
      staged_ = true;
      dst = memory::desc({B, heads, S, d}, dt::f32, tag::abcd);
      gemm_scratch(kOutputSlot, dst.get_size());
    }
  }
  pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), scratchpad_attr(attr), ctx.engine);
  prim_ = dnnl::matmul(pd_);
}

void AttentionGrad::forward(float* out, const float* a, const float* b) const {
  const int64_t H = H_;
  const float *src = a, *wei = b;
  float* dst = out;
  switch (kind_) {
    case Kind::scores_q:  // out dqkv (Q third), a dscores, b qkv (K third)
      wei = b + H;
      break;
    case Kind::scores_k:  // out dqkv (K third), a dscores, b qkv (Q third)
      dst = out + H;
      break;
    case Kind::context_probs:  // out dprobs, a dctx, b qkv (V third)
      wei = b + 2 * H;
      break;
    case Kind::context_v:  // out dqkv (V third), a dctx, b probs: dV = P^T dctx
      src = b, wei = a, dst = out + 2 * H;
      break;
  }
  std::pair<const void*, const void*> in{src, wei};
  if (bf16_) in = cast_inputs(in16_, src, wei);
  if (!staged_) {
    args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), in.first},
                          {DNNL_ARG_WEIGHTS, pd_.weights_desc(), in.second},
                          {DNNL_ARG_DST, pd_.dst_desc(), dst}});
    return;
  }
  auto* staged = reinterpret_cast<float*>(gemm_scratch(kOutputSlot, pd_.dst_desc().get_size()));
  args_.execute(prim_, {{DNNL_ARG_SRC, pd_.src_desc(), in.first},
                        {DNNL_ARG_WEIGHTS, pd_.weights_desc(), in.second},
                        {DNNL_ARG_DST, pd_.dst_desc(), staged}});
  // Head-major (B,heads,S,d) into the third of dqkv (rows of 3H floats).
  const int64_t rows = B_ * S_, heads = heads_, d = H / heads;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < heads; ++g)
      std::memcpy(dst + r * 3 * H + g * d, staged + head_major_at(r, g, heads, S_, d), size_t(d) * sizeof(float));
}

std::string AttentionGrad::impl_name() const { return impl_of(pd_); }

}  // namespace bertlab::ops

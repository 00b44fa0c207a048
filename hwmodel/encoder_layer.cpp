#include "hwmodel/encoder_layer.h"

#include <algorithm>

#include "base/error.h"

namespace bertlab::hw {

std::vector<Operand> op_operands(LayerOp op, const LayerDims& d) {
  const int64_t s = d.seq, h = d.hidden;
  const Operand x{"x", s * h}, w_qkv{"w_qkv", h * 3 * h}, qkv{"qkv", s * 3 * h},
      kt{"kt", d.heads * d.head_dim * s}, scores{"scores", d.heads * s * s}, ctx{"ctx", s * h},
      w_o{"w_o", h * h}, attn{"attn", s * h}, w_i{"w_i", h * d.ff}, ff{"ff", s * d.ff},
      w_f{"w_f", d.ff * h}, out{"out", s * h};
  std::vector<Operand> v;
  switch (op) {
    case LayerOp::qkv: v = {x, w_qkv, qkv}; break;
    case LayerOp::k_transpose: v = {qkv, kt}; break;
    case LayerOp::scores: v = {qkv, kt, scores}; break;
    case LayerOp::softmax: v = {scores}; break;
    case LayerOp::context: v = {scores, qkv, ctx}; break;
    case LayerOp::attn_out: v = {ctx, w_o, attn}; break;
    case LayerOp::residual_add: v = {x, attn}; break;
    case LayerOp::layernorm: v = {attn}; break;
    case LayerOp::ffn_in: v = {attn, w_i, ff}; break;
    case LayerOp::gelu: v = {ff}; break;
    case LayerOp::ffn_out: v = {ff, w_f, out}; break;
  }
  int64_t at = 0;
  for (auto& o : v) {
    o.offset = at;
    at += (o.bytes + 4095) / 4096 * 4096;
  }
  return v;
}

int64_t region_bytes(const std::vector<Operand>& v) {
  return v.empty() ? 0 : v.back().offset + (v.back().bytes + 4095) / 4096 * 4096;
}

bool paper_bwma(Arrangement a, const char* what) {
  if (a == Arrangement::rwma) return false;
  if (a == Arrangement::bwma) return true;
  fail("{}: arrangement '{}' is not one of the paper's two (rwma, bwma), the only ones TiC-SAT's kernels and the "
       "in-order core model that prices them are written for",
       what, to_string(a));
}

LayerGemm layer_gemm(LayerOp op, Arrangement a, const LayerDims& d, int64_t S) {
  const int64_t s = d.seq, h = d.hidden, hd = d.head_dim;
  const bool bw = paper_bwma(a, "the paper's encoder layer (layer_gemm)");
  // Column c0 of a matrix with `rows` rows and row stride `ld`: its byte offset.
  auto col = [&](int64_t c0, int64_t rows) { return bw ? c0 * rows : c0; };
  LayerGemm g;
  auto dense = [&](int64_t k, int64_t n) {
    g.m = s, g.k = k, g.n = n;
    g.lda = k, g.ldb = n, g.ldy = n;
    g.a_panel = g.y_panel = s * S;
    g.instances = {{0, 1, 2, 0, 0, 0}};
  };
  switch (op) {
    case LayerOp::qkv: dense(h, 3 * h); break;
    case LayerOp::attn_out: dense(h, h); break;
    case LayerOp::ffn_in: dense(h, d.ff); break;
    case LayerOp::ffn_out: dense(d.ff, h); break;
    case LayerOp::scores:  // operands qkv, kt, scores
      g.m = s, g.k = hd, g.n = s;
      g.lda = 3 * h, g.ldb = s, g.ldy = s;
      g.a_panel = g.y_panel = s * S;
      for (int64_t i = 0; i < d.heads; ++i)
        g.instances.push_back({0, 1, 2, col(i * hd, s), i * hd * s, i * s * s});
      break;
    case LayerOp::context:  // operands scores, qkv, ctx
      g.m = s, g.k = s, g.n = hd;
      g.lda = s, g.ldb = 3 * h, g.ldy = h;
      g.a_panel = g.y_panel = s * S;
      for (int64_t i = 0; i < d.heads; ++i)
        g.instances.push_back({0, 1, 2, i * s * s, col(2 * h + i * hd, s), col(i * hd, s)});
      break;
    case LayerOp::k_transpose:
    case LayerOp::softmax:
    case LayerOp::residual_add:
    case LayerOp::layernorm:
    case LayerOp::gelu:
      fail("encoder-layer op '{}' is not a GEMM", info(op).name);
  }
  return g;
}

}  // namespace bertlab::hw

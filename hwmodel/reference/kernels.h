#pragma once
// Reference kernels of one BERT encoder layer in the style of the arrangement paper's TiC-SAT
// code (smmComputeRWMA / smmComputeBWMA and the layer ops of its transformer_layers, commit
// dd1f15e): int8 data packed four to a 32-bit word, the S x S weight-stationary array fed
// one word per issued instruction, outputs added back into memory lane by lane. Written from
// the loop nests of that code, not copied. Each function runs the share of one core.
//
// The array instruction is a policy: FunctionalArray computes the products (tests check the
// GEMMs against a plain loop), BarrierArray is an empty asm statement that takes and returns
// the same words (what valgrind measures: the core's own instructions and memory accesses).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "hwmodel/encoder_layer.h"
#include "hwmodel/work.h"  // core_rows: the cores' split of rows, as the model's
#include "base/error.h"

namespace bertlab::hwref {

using hw::Arrangement;

// Valgrind stand-in for the array: no work, but every word it is given is consumed by a
// real instruction (valgrind drops loads whose value no instruction uses, so an empty asm
// alone would hide the weight loads from cachegrind), and every output it returns is used.
struct BarrierArray {
  uint32_t sink = 0;
  void reset() {}
  void load_weight(int64_t idx, uint32_t w) {
    sink ^= w;
    asm volatile("" : "+r"(sink) : "r"(idx));
  }
  uint32_t issue(int64_t lane, uint32_t x) {
    asm volatile("" : "+r"(x) : "r"(lane));
    return x;
  }
};

// A functional S x S weight-stationary array with TiC-SAT's timing of valid outputs: the
// output of input row r (S int8 lanes over S/4 words) is returned, word by word, from issue
// r*S/4 + L on, L = S/4 * (2S - 1) - 1 (fill and drain of the systolic wave).
template <int S>
struct FunctionalArray {
  static constexpr int W = S / 4;
  int8_t w[S][S]{};
  int8_t row[S]{};
  std::vector<uint32_t> out;
  int64_t issued = 0;
  void reset() { out.clear(), issued = 0; }
  void load_weight(int64_t idx, uint32_t word) {
    for (int b = 0; b < 4; ++b) w[(idx + b) / S][(idx + b) % S] = static_cast<int8_t>(word >> (8 * b));
  }
  uint32_t issue(int64_t lane, uint32_t x) {
    for (int b = 0; b < 4; ++b) row[lane * 4 + b] = static_cast<int8_t>(x >> (8 * b));
    if (lane == W - 1) {
      for (int j = 0; j < W; ++j) {
        uint32_t word = 0;
        for (int b = 0; b < 4; ++b) {
          int acc = 0;
          for (int k = 0; k < S; ++k) acc += row[k] * w[k][j * 4 + b];
          word |= static_cast<uint32_t>(static_cast<uint8_t>(acc)) << (8 * b);
        }
        out.push_back(word);
      }
    }
    const int64_t L = W * (2 * S - 1) - 1, q = issued++;
    return q >= L && q - L < static_cast<int64_t>(out.size()) ? out[q - L] : 0;
  }
};

// Four int8 lanes of `r` added into the word at `m` (TiC-SAT's add8in32).
inline void add8in32(uint32_t& m, uint32_t r) {
  auto* mp = reinterpret_cast<int8_t*>(&m);
  const auto* rp = reinterpret_cast<const int8_t*>(&r);
  for (int i = 0; i < 4; ++i) mp[i] = static_cast<int8_t>(mp[i] + rp[i]);
}

// One S x S weight tile already loaded: stream `rows` rows of S/4 words through the array
// and accumulate the valid outputs; `in(i)` is row i's first word, `out(o)` the word that
// valid output o (row o / (S/4), word o % (S/4)) adds into. Then the 2S-1 drain rows.
template <int S, class Array, class In, class Out>
inline void stream_tile(Array& arr, int64_t rows, In in, Out out) {
  constexpr int64_t W = S / 4, L = W * (2 * S - 1) - 1;
  int64_t o = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const uint32_t* p = in(i);
    for (int64_t j = 0; j < W; ++j) {
      const uint32_t r = arr.issue(j, p[j]);
      if (i * W + j >= L) add8in32(out(o++), r);
    }
  }
  for (int64_t i = rows * W; i < W * (rows + 2 * S - 1) - 1; ++i) {
    const uint32_t r = arr.issue(i % W, 0);
    if (i >= L) add8in32(out(o++), r);
  }
}

// RWMA (TiC-SAT smmComputeRWMA): sequence blocks of up to 128 rows, up to 512 / 128 blocks
// per L2 group split contiguously over the cores; per group: K in chunks of 256 (outermost),
// N in chunks of 256, the core's blocks, then L1 groups of 64 K-rows x 32 N-columns (64 x
// 32 * 64 / K when K < 64) walked tile by tile. The output word of valid output o is found
// by a division and a modulo of o (as in TiC-SAT), added into the row-major Y.
// The tiling and loop order are hwmodel/rwma_tiling.h's (the core model walks that header's
// rwma_chunk_tiles); they are written out here because these loops are what valgrind
// measures: through the shared template (forced inline) ffn_in at S = 8 ran 0.4-1.3% more
// instructions (10-30% more without forced inlining) under cachegrind, and even the shared
// constants alone 0.8% (registers); either would move the measured basis. Test "reference RWMA
// kernel walks the tiles of rwma_tiling.h ..." checks every tile and its order against it.
template <int S, class Array>
void gemm_rwma(Array& arr, const uint8_t* A, const uint8_t* B, uint8_t* Y, const hw::LayerGemm& g,
               const hw::GemmInstance& in, int64_t cores, int64_t core) {
  constexpr int64_t W = S / 4;
  const int64_t M = g.m, K = g.k, N = g.n;
  const int64_t rb = std::min<int64_t>(128, M);
  const int64_t kt1 = std::min<int64_t>(64, K) / S, ratio = 64 / std::min<int64_t>(64, K);
  const int64_t nt1 = std::min<int64_t>(32 * ratio, N) / S;
  const int64_t blocks = (M + rb - 1) / rb, per_l2 = std::min<int64_t>(512 / rb, blocks);
  const int64_t kt2 = std::min<int64_t>(256, K) / S / kt1, nt2 = std::min<int64_t>(256, N) / S / nt1;
  const int64_t kchunks = K / S / kt2 / kt1, nchunks = N / S / nt2 / nt1;
  const int64_t groups = (blocks + per_l2 - 1) / per_l2;
  const auto* a = reinterpret_cast<const uint32_t*>(A + in.a_off);
  const auto* b = reinterpret_cast<const uint32_t*>(B + in.b_off);
  auto* y = reinterpret_cast<uint32_t*>(Y + in.y_off);
  const int64_t lda = g.lda / 4, ldb = g.ldb / 4, ldy = g.ldy / 4;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const int64_t in_group = std::min(per_l2, blocks - gi * per_l2);
    const auto [b0, b1] = hw::core_rows(in_group, cores, core, 1);
    for (int64_t kc = 0; kc < kchunks; ++kc)
      for (int64_t nc = 0; nc < nchunks; ++nc)
        for (int64_t blk = b0; blk < b1; ++blk)
          for (int64_t tr2 = 0; tr2 < kt2; ++tr2)
            for (int64_t tc2 = 0; tc2 < nt2; ++tc2)
              for (int64_t tr1 = 0; tr1 < kt1; ++tr1)
                for (int64_t tc1 = 0; tc1 < nt1; ++tc1) {
                  const int64_t kt = (kc * kt2 + tr2) * kt1 + tr1, nt = (nc * nt2 + tc2) * nt1 + tc1;
                  const int64_t row0 = (gi * per_l2 + blk) * rb, rows = std::min(rb, M - row0);
                  const int64_t col0 = nt * W;
                  arr.reset();
                  const uint32_t* wp = b + kt * S * ldb;
                  for (int64_t i = 0; i < S; ++i, wp += ldb)
                    for (int64_t j = 0; j < W; ++j) arr.load_weight(i * S + j * 4, wp[col0 + j]);
                  const uint32_t* ap = a + row0 * lda + kt * W;
                  uint32_t* yp = y + row0 * ldy;
                  stream_tile<S>(
                      arr, rows, [&](int64_t i) { return ap + i * lda; },
                      [&](int64_t o) -> uint32_t& { return yp[(o / W) * ldy + col0 + o % W]; });
                }
  }
}

// BWMA (TiC-SAT smmComputeBWMA): core c owns a contiguous range of output panels; per panel,
// per k-tile: load the S x S tile (contiguous), stream the contiguous input panel and add
// into the contiguous output panel by pointer increment.
template <int S, class Array>
void gemm_bwma(Array& arr, const uint8_t* A, const uint8_t* B, uint8_t* Y, const hw::LayerGemm& g,
               const hw::GemmInstance& in, int64_t cores, int64_t core) {
  constexpr int64_t W = S / 4;
  const int64_t M = g.m, KT = g.k / S, NT = g.n / S;
  const auto [p0, p1] = hw::core_rows(NT, cores, core, 1);
  const auto* a = reinterpret_cast<const uint32_t*>(A + in.a_off);
  const auto* wp = reinterpret_cast<const uint32_t*>(B + in.b_off) + p0 * KT * S * W;
  auto* y = reinterpret_cast<uint32_t*>(Y + in.y_off);
  for (int64_t np = p0; np < p1; ++np)
    for (int64_t kt = 0; kt < KT; ++kt) {
      arr.reset();
      for (int64_t i = 0; i < S * W; ++i) arr.load_weight(i * 4, *wp++);
      const uint32_t* ap = a + kt * (g.a_panel / 4);
      uint32_t* yp = y + np * (g.y_panel / 4);
      stream_tile<S>(
          arr, M, [&](int64_t i) { return ap + i * W; }, [&](int64_t o) -> uint32_t& { return yp[o]; });
    }
}

// K^T of every head as the scores' weight operand. RWMA (TiC-SAT Transpose::transpose):
// 4 x 4 byte blocks, four words read down the rows of K (row stride 3 x hidden), four words
// of K^T (seq x 64 -> 64 x seq) written. BWMA (transpose_rearranged): S x S tiles of K's
// panels transposed into the S x S tiles [seq/S][64][S] of the weight layout. Rows of K
// (RWMA: 4-row blocks; BWMA: S-row tiles) are split over the cores.
inline void k_transpose(Arrangement arr, const uint8_t* qkv, uint8_t* kt, const hw::LayerDims& d,
                        int64_t S, int64_t cores, int64_t core) {
  const int64_t s = d.seq, hd = d.head_dim, h = d.hidden;
  for (int64_t head = 0; head < d.heads; ++head) {
    uint32_t* out = reinterpret_cast<uint32_t*>(kt + head * hd * s);
    if (arr == Arrangement::rwma) {
      const auto* in = reinterpret_cast<const uint32_t*>(qkv + h + head * hd);
      const int64_t ld = 3 * h / 4, wt = hd / 4, ht = s / 4;
      const auto [i0, i1] = hw::core_rows(ht, cores, core, 1);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < wt; ++j) {
          uint32_t sw[4];
          for (int k = 0; k < 4; ++k) sw[k] = in[(i * 4 + k) * ld + j];
          for (int k = 0; k < 4; ++k) {
            uint32_t r = 0;
            for (int q = 0; q < 4; ++q) r |= ((sw[q] >> (8 * k)) & 0xFF) << (8 * q);
            out[(j * 4 + k) * ht + i] = r;
          }
        }
    } else {
      const auto* in = reinterpret_cast<const uint32_t*>(qkv + (h + head * hd) * s);
      const int64_t W = S / 4, rows_t = s / S, cols_t = hd / S;
      const auto [i0, i1] = hw::core_rows(rows_t, cores, core, 1);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = 0; j < cols_t; ++j) {
          const uint32_t* tin = in + (j * rows_t + i) * S * W;   // K rows i*S.., cols j*S..
          uint32_t* tout = out + (i * cols_t + j) * S * W;       // K^T tile (n-panel i, k-tile j)
          for (int64_t m = 0; m < W; ++m)
            for (int64_t b = 0; b < 4; ++b)
              for (int64_t k = 0; k < W; ++k) {
                uint32_t r = 0;
                for (int q = 0; q < 4; ++q) r |= ((tin[(4 * k + q) * W + m] >> (8 * b)) & 0xFF) << (8 * q);
                tout[(m * 4 + b) * W + k] = r;
              }
        }
    }
  }
}

// exp by lookup of the top 5 bits (TiC-SAT's softmax table).
inline constexpr uint8_t kExpLookup[32] = {4, 5, 7, 8, 11, 14, 18, 23, 30, 38, 49, 63, 80, 103, 132, 170,
                                           0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 3};

// Per-row element walk: RWMA row r is `len` contiguous bytes; BWMA it is S bytes in each of
// len / S panels `panel` bytes apart.
template <class F>
inline void for_row(Arrangement arr, uint8_t* m, int64_t r, int64_t len, int64_t S, int64_t panel, F f) {
  if (arr == Arrangement::rwma) {
    uint8_t* p = m + r * len;
    for (int64_t j = 0; j < len; ++j) f(p[j]);
  } else {
    uint8_t* p = m + r * S;
    for (int64_t j = 0; j < len / S; ++j, p += panel)
      for (int64_t k = 0; k < S; ++k) f(p[k]);
  }
}

// TiC-SAT Softmax::compute / computeRearranged per head: pass 1 replaces each score by the
// exp lookup and sums the row, pass 2 divides; rows contiguous (RWMA) or gathered from every
// panel (BWMA). Rows split over the cores.
inline void softmax(Arrangement arr, uint8_t* scores, const hw::LayerDims& d, int64_t S, int64_t cores,
                    int64_t core) {
  const int64_t s = d.seq;
  const auto [r0, r1] = hw::core_rows(s, cores, core, arr == Arrangement::bwma ? std::max<int64_t>(1, 64 / S) : 1);
  for (int64_t head = 0; head < d.heads; ++head) {
    uint8_t* m = scores + head * s * s;
    for (int64_t r = r0; r < r1; ++r) {
      int32_t sum = 0;
      for_row(arr, m, r, s, S, s * S, [&](uint8_t& v) { v = kExpLookup[v >> 3], sum += v; });
      const int32_t div = std::max(1, sum >> 8);
      for_row(arr, m, r, s, S, s * S, [&](uint8_t& v) { v = static_cast<uint8_t>(v / div); });
    }
  }
}

// TiC-SAT AddNormalize (the normalisation): three passes per row (sum, variance,
// normalise), in place; rows contiguous (RWMA) or gathered from the panels (BWMA).
inline void layernorm(Arrangement arr, uint8_t* x, const hw::LayerDims& d, int64_t S, int64_t cores,
                      int64_t core) {
  const int64_t s = d.seq, len = d.hidden;
  const auto [r0, r1] = hw::core_rows(s, cores, core, arr == Arrangement::bwma ? std::max<int64_t>(1, 64 / S) : 1);
  for (int64_t r = r0; r < r1; ++r) {
    int32_t sum = 0;
    for_row(arr, x, r, len, S, s * S, [&](uint8_t& v) { sum += static_cast<int8_t>(v); });
    const int32_t mean = sum / static_cast<int32_t>(len);
    int32_t var = 0;
    for_row(arr, x, r, len, S, s * S, [&](uint8_t& v) {
      const int32_t t = static_cast<int8_t>(v) - mean;
      var += t * t;
    });
    // 1/sd in fixed point with 2 fraction bits, by an integer square root of the variance.
    int32_t sd = 0;
    while ((sd + 1) * (sd + 1) <= var / static_cast<int32_t>(len)) ++sd;
    const int32_t inv = 4 / (sd + 1);
    for_row(arr, x, r, len, S, s * S, [&](uint8_t& v) {
      v = static_cast<uint8_t>(((static_cast<int8_t>(v) - mean) * inv) >> 2);
    });
  }
}

// Byte range [first, last) of `bytes` for one core: contiguous, whole 64-byte lines.
inline std::pair<int64_t, int64_t> core_bytes(int64_t bytes, int64_t cores, int64_t core) {
  const auto [l0, l1] = hw::core_rows((bytes + 63) / 64, cores, core, 1);
  return {std::min(bytes, l0 * 64), std::min(bytes, l1 * 64)};
}

// y += x lane by lane in storage order (layout independent).
inline void residual_add(uint8_t* y, const uint8_t* x, int64_t bytes, int64_t cores, int64_t core) {
  const auto [b0, b1] = core_bytes(bytes, cores, core);
  auto* yw = reinterpret_cast<uint32_t*>(y);
  const auto* xw = reinterpret_cast<const uint32_t*>(x);
  for (int64_t i = b0 / 4; i < b1 / 4; ++i) add8in32(yw[i], xw[i]);
}

// GELU of int8 by a 256-entry table (built once per call), in storage order.
inline void gelu(uint8_t* x, int64_t bytes, int64_t cores, int64_t core) {
  uint8_t table[256];
  for (int v = 0; v < 256; ++v) {
    const int t = static_cast<int8_t>(v);  // x * sigmoid(1.702 x) in fixed point, x in 1/16
    table[v] = static_cast<uint8_t>(t <= -48 ? 0 : t >= 48 ? t : t * (t + 48) / 96);
  }
  const auto [b0, b1] = core_bytes(bytes, cores, core);
  for (int64_t i = b0; i < b1; ++i) x[i] = table[x[i]];
}

enum class ArrayKind : uint8_t { functional, barrier };

template <int S, class Array>
void run_gemm(Array& arr, hw::LayerOp op, Arrangement a, const hw::LayerDims& d, uint8_t* base,
              int64_t cores, int64_t core) {
  const auto ops = hw::op_operands(op, d);
  const auto g = hw::layer_gemm(op, a, d, S);
  for (const auto& in : g.instances) {
    const uint8_t* A = base + ops[in.a].offset;
    const uint8_t* B = base + ops[in.b].offset;
    uint8_t* Y = base + ops[in.y].offset;
    if (hw::paper_bwma(a, "the reference kernels"))
      gemm_bwma<S>(arr, A, B, Y, g, in, cores, core);
    else
      gemm_rwma<S>(arr, A, B, Y, g, in, cores, core);
  }
}

template <int S>
void run_gemm_kind(ArrayKind k, hw::LayerOp op, Arrangement a, const hw::LayerDims& d, uint8_t* base,
                   int64_t cores, int64_t core) {
  switch (k) {
    case ArrayKind::functional: {
      FunctionalArray<S> arr;
      return run_gemm<S>(arr, op, a, d, base, cores, core);
    }
    case ArrayKind::barrier: {
      BarrierArray arr;
      return run_gemm<S>(arr, op, a, d, base, cores, core);
    }
  }
}

// Runs core `core`'s share of `op` on the operands at `base` (op_operands offsets). S is the
// kernel size (4, 8, 16 or 32). Not inlined: valgrind's per-function counts of this function
// (and of what it inlines) are the kernel's.
[[gnu::noinline]] inline void run_op(ArrayKind k, hw::LayerOp op, Arrangement a, const hw::LayerDims& d,
                                     int64_t S, uint8_t* base, int64_t cores, int64_t core) {
  const auto ops = hw::op_operands(op, d);
  switch (op) {
    case hw::LayerOp::qkv:
    case hw::LayerOp::scores:
    case hw::LayerOp::context:
    case hw::LayerOp::attn_out:
    case hw::LayerOp::ffn_in:
    case hw::LayerOp::ffn_out:
      switch (S) {
        case 4: return run_gemm_kind<4>(k, op, a, d, base, cores, core);
        case 8: return run_gemm_kind<8>(k, op, a, d, base, cores, core);
        case 16: return run_gemm_kind<16>(k, op, a, d, base, cores, core);
        case 32: return run_gemm_kind<32>(k, op, a, d, base, cores, core);
        default: fail("kernel size {} not supported by the reference (4, 8, 16 or 32)", S);
      }
    case hw::LayerOp::k_transpose:
      return k_transpose(a, base + ops[0].offset, base + ops[1].offset, d, S, cores, core);
    case hw::LayerOp::softmax: return softmax(a, base + ops[0].offset, d, S, cores, core);
    case hw::LayerOp::layernorm: return layernorm(a, base + ops[0].offset, d, S, cores, core);
    case hw::LayerOp::residual_add:
      return residual_add(base + ops[1].offset, base + ops[0].offset, ops[0].bytes, cores, core);
    case hw::LayerOp::gelu: return gelu(base + ops[0].offset, ops[0].bytes, cores, core);
  }
}

}  // namespace bertlab::hwref

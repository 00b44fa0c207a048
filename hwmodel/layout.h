#pragma once
// Where the elements of a matrix sit in off-chip memory under the two arrangements, and
// closed-form counts of the cache lines and DRAM rows that a run of accesses touches.
//
// RWMA (row-wise): element (r, c) at base + r*ld + c*e.
// BWMA (block-wise): column panels of width S, element (r, c) at
//   base + (c/S)*panel_stride + r*S*e + (c%S)*e
// which is X as [K/S][M][S], Y as [N/S][M][S] and, for a K x N weight, S x S tiles [N/S][K][S].
#include <bit>
#include <cstdint>
#include <vector>

#include "hwmodel/arrangement.h"

namespace bertlab::hw {

// log2(x) when x is a power of two, else -1.
inline int log2_or_minus_one(int64_t x) {
  return x > 0 && std::has_single_bit(static_cast<uint64_t>(x)) ? std::countr_zero(static_cast<uint64_t>(x)) : -1;
}

// The block (cache line, DRAM row) of `bytes` bytes an address lies in: a shift when `bytes`
// is a power of two, else a division (the same value; speed only).
class BlockOf {
 public:
  explicit BlockOf(int64_t bytes) : bytes_(static_cast<uint64_t>(bytes)), shift_(log2_or_minus_one(bytes)) {}
  int64_t operator()(uint64_t a) const { return static_cast<int64_t>(shift_ >= 0 ? a >> shift_ : a / bytes_); }

 private:
  uint64_t bytes_;
  int shift_;
};

struct MatrixView {
  uint64_t base = 0;
  int64_t rows = 0, cols = 0;  // extent of the view (cols padded to S under BWMA if asked)
  int64_t elem = 1;            // bytes per element
  int64_t row_stride = 0;      // bytes between consecutive rows (inside a panel)
  int64_t panel_width = 0;     // columns per panel; 0: row-major (one unbounded panel)
  int64_t panel_stride = 0;    // bytes between consecutive panels
  int64_t col0 = 0;            // first column of the view inside the panels of its tensor

  uint64_t addr(int64_t r, int64_t c) const {
    const int64_t cc = c + col0;
    if (panel_width == 0) return base + r * row_stride + cc * elem;
    return base + (cc / panel_width) * panel_stride + r * row_stride + (cc % panel_width) * elem;
  }
};

// A whole matrix of `rows` x `cols` at `base` in the given arrangement (its panel width at
// kernel S, arrangement.h).
MatrixView make_view(Arrangement a, uint64_t base, int64_t rows, int64_t cols, int64_t elem,
                     int64_t S);
// Bytes the matrix occupies (panels pad the columns to a multiple of the panel width).
int64_t view_bytes(Arrangement a, int64_t rows, int64_t cols, int64_t elem, int64_t S);
// Rows [r0, r0+nr) x cols [c0, c0+nc) of v as a view of its own.
MatrixView sub_view(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0, int64_t nc);

// `count` equal segments of `width` bytes at start, start+stride, ... (stride >= width),
// visited in that order: the access pattern of one operand between two schedule events.
struct Sweep {
  uint64_t start = 0;
  int64_t count = 0;
  int64_t stride = 0;
  int64_t width = 0;
  uint64_t end() const { return start + (count - 1) * stride + width; }  // one past the last byte
};

// Sum_{i<n} floor((a*i + b) / m), a, b >= 0, m > 0, in O(log) (Euclid-like reduction).
uint64_t floor_sum(uint64_t n, uint64_t m, uint64_t a, uint64_t b);

// Distinct aligned blocks of `block` bytes (cache lines or DRAM rows) a sweep touches.
// Exact: per-segment blocks summed by floor sums, minus the blocks two neighbouring
// segments share.
int64_t distinct_blocks(const Sweep& s, int64_t block);
inline int64_t first_block(const Sweep& s, int64_t block) { return s.start / block; }
inline int64_t last_block(const Sweep& s, int64_t block) { return (s.end() - 1) / block; }

// The sweeps that visit rows [r0, r0+nr) x cols [c0, c0+nc) of v in storage order
// (panel by panel, row by row), consecutive contiguous sweeps merged.
std::vector<Sweep> block_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc);
// Sweeps over the same rows visiting one line-wide column strip at a time: the order in
// which a schedule that walks a row-major block column by column first touches its lines.
std::vector<Sweep> strip_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc, int64_t line);
int64_t lines_of(const std::vector<Sweep>& sweeps, int64_t line);

}  // namespace bertlab::hw

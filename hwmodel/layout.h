#pragma once
// Where the elements of a matrix sit in off-chip memory, and closed-form counts of the cache
// lines and DRAM rows that a run of accesses touches.
//
// An arrangement's layout is its address function (arrangement.h ArrangementDesc::address):
// element (r, c) of a matrix placed at p is at address(p, r, c). Two layouts also have a fast
// form, MatrixView's panel arithmetic, which the closed forms (analytic_*.cpp) read:
// row-major (RWMA): element (r, c) at base + r*ld + c*e;
// column panels of width S (BWMA): base + (c/S)*panel_stride + r*S*e + (c%S)*e, which is X as
//   [K/S][M][S], Y as [N/S][M][S] and, for a K x N weight, S x S tiles [N/S][K][S].
// A view of any other layout calls its arrangement's address function for every address.
#include <bit>
#include <cstdint>
#include <vector>

#include "hwmodel/arrangement.h"

namespace bertlab::hw {

// a / b rounded up (a >= 0, b > 0): tiles, chunks or lines needed to cover a.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The i-th of `parts` near-equal shares of n, the first n % parts of them one larger (items
// dealt round-robin: output panels over cores, visits over strata).
inline int64_t even_share(int64_t n, int64_t parts, int64_t i) { return n / parts + (i < n % parts ? 1 : 0); }

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

// Where a whole matrix sits: its first byte, its extent, its element size and the array's
// kernel S (the panel or tile edge of the arrangements that have one).
struct Placement {
  uint64_t base = 0;
  int64_t rows = 0, cols = 0, elem = 1, S = 1;
};

struct MatrixView {
  uint64_t base = 0;
  int64_t rows = 0, cols = 0;  // extent of the view (cols padded to S under BWMA if asked)
  int64_t elem = 1;            // bytes per element
  int64_t row_stride = 0;      // bytes between consecutive rows (inside a panel)
  int64_t panel_width = 0;     // columns per panel; 0: row-major (one unbounded panel)
  int64_t panel_stride = 0;    // bytes between consecutive panels
  int64_t col0 = 0;            // first column of the view inside the panels of its tensor
  // A layout with no panel form: its arrangement's address function, of element (r, c) of the
  // whole matrix `whole`; the view is rows [row0, row0 + rows) x cols [col0, col0 + cols) of
  // it (base stays whole.base). Null for the panel arithmetic (base then includes row0).
  uint64_t (*address)(const Placement& p, int64_t r, int64_t c) = nullptr;
  Placement whole;
  int64_t row0 = 0;

  uint64_t addr(int64_t r, int64_t c) const {
    const int64_t cc = c + col0;
    if (address) [[unlikely]] return address(whole, r + row0, cc);
    if (panel_width == 0) return base + r * row_stride + cc * elem;
    return base + (cc / panel_width) * panel_stride + r * row_stride + (cc % panel_width) * elem;
  }
};

// Whether the view's S x S tiles are contiguous blocks: S-column panels of S-element rows
// (BWMA's [N/S][K][S] tiles); otherwise a tile is S strided rows.
inline bool contiguous_tiles(const MatrixView& v, int64_t S) {
  return v.panel_width == S && v.row_stride == S * v.elem;
}

// A whole matrix of `rows` x `cols` at `base` in the given arrangement's layout at kernel S
// (arrangement.h: its panel form when it has one, else its address function).
MatrixView make_view(Arrangement a, uint64_t base, int64_t rows, int64_t cols, int64_t elem,
                     int64_t S);
// Bytes the matrix occupies in that layout (ArrangementDesc::bytes: panels and tiles pad).
int64_t view_bytes(Arrangement a, int64_t rows, int64_t cols, int64_t elem, int64_t S);
// A row-major matrix whatever the arrangement (buffers that every arrangement keeps row-major:
// the embedding's gathered rows, the converted copies of transposed operands), and its bytes.
MatrixView row_major_view(uint64_t base, int64_t rows, int64_t cols, int64_t elem);
inline int64_t row_major_bytes(int64_t rows, int64_t cols, int64_t elem) { return rows * cols * elem; }
// The rows that a row op keeps on one core because they share cache lines of `line` bytes:
// under column panels the line / (S e) rows of a panel; row-major 1; any other layout the rows
// from row 0 on whose first element lies in row 0's line.
int64_t rows_sharing_a_line(const MatrixView& v, int64_t line);
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
// (panel by panel, row by row), consecutive contiguous sweeps merged. A layout with no panel
// form: each row's runs of consecutive addresses (found through its address function), in
// address order, adjacent runs merged.
std::vector<Sweep> block_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc);
// Sweeps over the same rows visiting one line-wide column strip at a time: the order in
// which a schedule that walks a row-major block column by column first touches its lines.
std::vector<Sweep> strip_sweeps(const MatrixView& v, int64_t r0, int64_t nr, int64_t c0,
                                int64_t nc, int64_t line);
int64_t lines_of(const std::vector<Sweep>& sweeps, int64_t line);

}  // namespace bertlab::hw

#pragma once
// The memory work of one node, lowered to the schedules the paper's kernels run, and the
// traffic those schedules cause. The analytic model (analytic.h) and the exact trace
// simulator (tracesim.h) consume the same work items, so they can be compared one to one.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hwmodel/layout.h"

namespace bertlab::hw {

// Depth of the memory controller's write queue (per request stream), in lines.
inline constexpr int64_t kWriteQueueLines = 64;

// Y(m x n) += A(m x k) * B(k x n) on an S x S weight-stationary array, once per instance.
// k and n are the padded extents (multiples of S); the views hold the logical extents.
// BWMA schedule: output panels round-robin over cores; per panel, per k-tile: load the S x S
//   weight tile, stream the A panel row by row and read-modify-write the Y panel.
// RWMA schedule: sequence blocks of block_rows rows round-robin over cores; per block, per
//   output column tile, per k-tile: load the tile (S rows of S elements), stream the block's
//   rows of A and read-modify-write the block's rows of Y.
struct GemmWork {
  Arrangement arrangement = kBaselineArrangement;
  int64_t S = 8;
  int64_t m = 0, n = 0, k = 0;
  int64_t block_rows = 128;
  std::string a_name = "A", b_name = "B", y_name = "Y";
  std::vector<std::array<MatrixView, 3>> instances;  // a, b, y per product
};

// BWMA with fewer output panels than cores (attention heads: d / S panels per product):
// the products run `groups` at a time, each on its own group of `cores` cores (product i on
// group i mod groups, panels round-robin inside the group); with at least as many panels as
// cores, one group of all cores takes the products one after another.
struct BwmaGroups {
  int64_t cores = 1, groups = 1;
  int64_t first_core(int64_t instance) const { return (instance % groups) * cores; }
};
inline BwmaGroups bwma_groups(const GemmWork& w, int64_t P) {
  const int64_t NT = std::max<int64_t>(1, w.n / w.S), per = std::min(P, NT);
  const int64_t inst = std::max<int64_t>(1, static_cast<int64_t>(w.instances.size()));
  return {per, std::max<int64_t>(1, std::min(P / per, inst))};
}

// Streaming accesses: each sweep is split across cores (rows, or lines of a contiguous span)
// and walked once; sweeps run one after another.
struct StreamAccess {
  std::string operand;
  Sweep sweep;
  bool write = false;
};
struct StreamWork {
  std::vector<StreamAccess> accesses;
};

// Row-wise ops (softmax, layernorm, embedding's output): each row of `len` elements is
// read from every input `passes` times and then written to the output. Rows are split
// across cores in chunks that keep whole cache lines (BWMA rows share lines) on one core.
struct RowMatrix {
  std::vector<MatrixView> inputs;  // rows x len each
  MatrixView output;
};
struct RowWork {
  int64_t rows = 0, len = 0, passes = 1;
  std::vector<std::string> input_names;
  std::string output_name = "out";
  std::vector<RowMatrix> matrices;
};

// The rows each core takes of `rows` split over `cores` (RowWork, and the blocks and panels of
// the core model's schedules): contiguous chunks of ceil(rows / cores) rounded up to a multiple
// of `align` (BWMA rows sharing a line stay on one core); cores past the last chunk get none.
inline int64_t row_chunk(int64_t rows, int64_t cores, int64_t align) {
  return ceil_div(ceil_div(rows, cores), align) * align;
}
// Rows [first, last) of that split that core `core` works on.
inline std::pair<int64_t, int64_t> core_rows(int64_t rows, int64_t cores, int64_t core, int64_t align) {
  const int64_t chunk = row_chunk(rows, cores, align), first = std::min(rows, core * chunk);
  return {first, std::min(rows, first + chunk)};
}

struct OperandTraffic {
  int64_t read_lines = 0;   // DRAM line reads (LLC misses, write-allocate fills included)
  int64_t write_lines = 0;  // DRAM line writes (dirty evictions and the final flush)
  int64_t row_misses = 0;   // row-buffer misses of this operand's streams
  int64_t refetch = 1;      // analytic: times each line is brought in (1: perfect reuse)
  std::string why;          // analytic: the reuse decision in words
};

struct Traffic {
  int64_t line_bytes = 64, burst_bytes = 64;
  std::map<std::string, OperandTraffic> operands;
  std::vector<int64_t> l1_misses;   // per core
  std::vector<int64_t> llc_misses;  // per core: DRAM line reads each core waits for
  int64_t accesses = 0;             // core memory instructions (segments touched)

  int64_t read_lines() const;
  int64_t write_lines() const;
  int64_t row_misses() const;
  int64_t dram_bytes() const { return (read_lines() + write_lines()) * line_bytes; }
  int64_t bursts() const { return dram_bytes() / burst_bytes; }
  int64_t row_hits() const { return read_lines() + write_lines() - row_misses(); }
  void add(const Traffic& o);
};

}  // namespace bertlab::hw

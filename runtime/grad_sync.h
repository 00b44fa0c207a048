#pragma once
// Data-parallel gradient synchronisation in buckets, overlapped with backward, as PyTorch's
// DistributedDataParallel does it: the gradient arena is cut into contiguous buckets of about
// `bucket_bytes`, from its end (the last parameters, whose gradients backward finishes first);
// a bucket's allreduce starts as soon as the last backward node that touches any of its
// gradients has run, and a communication thread moves it on (runtime/distributed.h). The allreduce node of
// the graph waits for them all. With gradient accumulation only the last micro-batch's
// backward starts buckets (StepContext::sync_gradients). Optionally the sums go over the wire
// in bf16 (fp32 -> bf16 by round to nearest even before, back after).
//
// Row-sparse gradients: the embedding backward adds to the word-embedding gradient only the
// rows of the batch's tokens, and it runs last. With overlap that table's bucket does not
// wait for it: the bucket is ready after the table's other last touch (the tied MLM decoder's
// weight gradient, at the start of backward), the embedding backward adds its rows into a
// compact table of the batch's distinct tokens instead, and finish() exchanges those rows
// (MPI_Allgatherv of ids and rows) and adds every rank's, in rank order, on every rank. The sum
// is the flat allreduce's, in another order.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph.h"
#include "runtime/params.h"
#include "runtime/precision.h"

namespace bertlab {

// One bucket: floats [begin, end) of the gradient arena (alignment gaps included: the buckets
// partition the arena), ready after graph node `ready_node` (-1: before any node).
struct GradBucket {
  int64_t begin = 0, end = 0;
  int64_t ready_node = -1;
};

// A gradient whose last contribution is a row scatter-add: output 0 (the word table) of
// embedding_grad node `node`; the table is `rows` x `width` floats at `offset` in the arena.
struct RowSparseGrad {
  int64_t node = -1;
  std::string param;
  int64_t offset = 0, rows = 0, width = 0;
};
std::vector<RowSparseGrad> row_sparse_grads(const Graph& g, const ParamStore& grads);

// The buckets of a training graph's gradients (tensors of role gradient, named grad:<param>),
// whose arena `grads` lays out, in the order their allreduces start (ready_node ascending).
// defer_rows: each row-sparse gradient is a bucket of its own, ready after its last touch
// other than its embedding backward (before any node when there is none).
std::vector<GradBucket> plan_grad_buckets(const Graph& g, const ParamStore& grads, int64_t bucket_bytes,
                                          bool defer_rows = false);

class GradientSync {
 public:
  // overlap = false: every bucket starts at finish(), after backward (one bucket then, unless
  // the sums are in bf16, which keeps the buckets to bound its conversion buffer's passes).
  GradientSync(const Graph& g, ParamStore& grads, int64_t bucket_bytes, bool overlap, Precision wire);
  // Before the backward of the step's last micro-batch: buckets will start as they are ready.
  void arm();
  // After graph node `node` ran: starts the buckets it made ready.
  void after_node(int64_t node);
  // The allreduce node: starts what has not started, waits for all, (bf16) copies back, and
  // adds every rank's deferred rows.
  void finish();
  // Whether embedding_grad node `node` adds its word rows to the compact table (rows_for)
  // instead of the gradient arena: overlapped, armed, and its table is row-sparse.
  bool defers_rows(int64_t node) const;
  // The compact table (zeroed) and the token ids renumbered into it, for the `count` ids of
  // embedding_grad node `node`'s batch: scatter-adding there gives the table's rows, in
  // ascending id order, that finish() exchanges.
  struct CompactRows {
    float* table;
    const int32_t* ids;
  };
  CompactRows rows_for(int64_t node, const int32_t* ids, int64_t count);
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // The last step's start of each bucket: the graph node after which it started, or
  // kAtFinish when the allreduce node started it (for tests and profiles).
  static constexpr int64_t kAtFinish = -2;
  const std::vector<int64_t>& started_after() const { return started_after_; }

 private:
  void start(size_t b, int64_t after);
  ParamStore& grads_;
  std::vector<GradBucket> buckets_;
  bool overlap_, armed_ = false;
  Precision wire_;
  size_t next_ = 0;              // buckets [0, next_) have started this step
  std::vector<uint16_t> wire16_;  // bf16: the arena's sums on the wire
  std::vector<int64_t> started_after_;
  // Overlapped: the row-sparse gradients and, per one, the last step's distinct ids (ascending),
  // their compact rows, the renumbered ids and an id -> slot map (-1: absent).
  struct Deferred {
    RowSparseGrad grad;
    std::vector<int32_t> distinct, renumbered, slot;
    std::vector<float> rows;
    bool pending = false;
  };
  std::vector<Deferred> deferred_;
  void add_deferred_rows();
};

}  // namespace bertlab

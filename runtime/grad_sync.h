#pragma once
// Data-parallel gradient synchronisation in buckets, overlapped with backward, as PyTorch's
// DistributedDataParallel does it: the gradient arena is cut into contiguous buckets of about
// `bucket_bytes`, from its end (the last parameters, whose gradients backward finishes first);
// a bucket's allreduce starts as soon as the last backward node that touches any of its
// gradients has run, and a communication thread moves it on (runtime/distributed.h). The allreduce node of
// the graph waits for them all. With gradient accumulation only the last micro-batch's
// backward starts buckets (StepContext::sync_gradients). Optionally the sums go over the wire
// in bf16 (fp32 -> bf16 by round to nearest even before, back after).
#include <cstdint>
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

// The buckets of a training graph's gradients (tensors of role gradient, named grad:<param>),
// whose arena `grads` lays out, in the order their allreduces start (ready_node ascending).
std::vector<GradBucket> plan_grad_buckets(const Graph& g, const ParamStore& grads, int64_t bucket_bytes);

class GradientSync {
 public:
  // overlap = false: every bucket starts at finish(), after backward (one bucket then, unless
  // the sums are in bf16, which keeps the buckets to bound its conversion buffer's passes).
  GradientSync(const Graph& g, ParamStore& grads, int64_t bucket_bytes, bool overlap, Precision wire);
  // Before the backward of the step's last micro-batch: buckets will start as they are ready.
  void arm();
  // After graph node `node` ran: starts the buckets it made ready.
  void after_node(int64_t node);
  // The allreduce node: starts what has not started, waits for all, and (bf16) copies back.
  void finish();
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
};

}  // namespace bertlab

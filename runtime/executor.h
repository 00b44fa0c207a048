#pragma once
// Runs a graph: every kernel (oneDNN primitive, packed weights) is made once at construction;
// run() only executes them, in graph order, on buffers planned once.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/graph.h"
#include "runtime/memory_plan.h"
#include "runtime/params.h"

namespace bertlab {

class Executor {
 public:
  // `params` must outlive the executor; weights are packed from it now and by repack_weights().
  Executor(Graph graph, const ParamStore& params);
  ~Executor();

  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  int64_t packed_weight_bytes() const { return packed_weight_bytes_; }

  // Graph input buffer (input_ids, token_type_ids, attention_mask), int32, planned in the arena.
  int32_t* input(const std::string& name);
  // Graph output by public name (last_hidden_state, ...), valid until the next run().
  const float* output(const std::string& name) const;
  Shape output_shape(const std::string& name) const;
  const float* tensor_data(int tensor_id) const;

  // Executes every node once. With `node_seconds`, times each node (resized to nodes().size()).
  void run(std::vector<double>* node_seconds = nullptr);
  // Re-reads the weights from the parameter store (after they changed).
  void repack_weights();

 private:
  void* buffer(int tensor_id) const;
  std::function<void()> make_step(const Node& n);

  Graph graph_;
  const ParamStore& params_;
  MemoryPlan plan_;
  AlignedBuffer<std::byte> arena_;
  std::vector<std::function<void()>> steps_;
  std::vector<std::function<void()>> repackers_;
  int64_t packed_weight_bytes_ = 0;
};

}  // namespace bertlab

#pragma once
// The oneDNN CPU engine and stream shared by every primitive (safe to share: one process-wide
// engine; primitives run on the calling thread's OpenMP pool).
#include <initializer_list>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

namespace bertlab::ops {

struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

DnnlContext& dnnl_context();

// Every primitive of ops/ is created with these attributes (plus its own): a user-managed
// scratchpad. Left to the library, each primitive of Debian's oneDNN build owns its scratchpad
// from creation on (a BERT-base training step's primitives held 103 MiB that way, measured in
// docs/training.md, "Peak memory"); PrimitiveArgs::execute instead gives every primitive the
// calling thread's one shared buffer, as large as the largest scratchpad run so far.
// Primitives of one thread run one after another, so they never need theirs at the same time.
dnnl::primitive_attr scratchpad_attr(dnnl::primitive_attr attr = {});

// Wraps a plain float buffer as oneDNN memory without copying.
dnnl::memory wrap(const dnnl::memory::desc& md, const void* data);

// The arguments of one primitive, kept between calls: memory objects are made on the first call
// and later calls only swap their data pointers, so running a primitive allocates nothing.
class PrimitiveArgs {
 public:
  struct Arg {
    int id;
    dnnl::memory::desc md;
    const void* data;
  };
  const std::unordered_map<int, dnnl::memory>& bind(std::initializer_list<Arg> args);
  // Binds, runs `p` on the calling thread's stream (on the shared engine) and waits; through the C API, whose argument array is
  // kept here (the C++ execute() builds a new one on every call). A primitive created with
  // scratchpad_attr() gets the thread's shared scratchpad.
  void execute(const dnnl::primitive& p, std::initializer_list<Arg> args);

 private:
  std::unordered_map<int, dnnl::memory> map_;
  std::vector<dnnl_exec_arg_t> c_args_;
  const_dnnl_primitive_t scratch_of_ = nullptr;  // the primitive scratch_md_ was queried from
  dnnl::memory::desc scratch_md_;                // its user scratchpad (zero: none)
};

}  // namespace bertlab::ops

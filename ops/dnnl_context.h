#pragma once
// The oneDNN CPU engine and stream shared by every primitive (safe to share: one process-wide
// engine; primitives run on the calling thread's OpenMP pool).
#include <oneapi/dnnl/dnnl.hpp>

namespace bertlab::ops {

struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

DnnlContext& dnnl_context();

// Wraps a plain float buffer as oneDNN memory without copying.
dnnl::memory wrap(const dnnl::memory::desc& md, const void* data);

}  // namespace bertlab::ops

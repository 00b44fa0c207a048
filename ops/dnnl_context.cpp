#include "ops/dnnl_context.h"

namespace bertlab::ops {

DnnlContext& dnnl_context() {
  static DnnlContext ctx;
  return ctx;
}

dnnl::memory wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, dnnl_context().engine, const_cast<void*>(data));
}

}  // namespace bertlab::ops

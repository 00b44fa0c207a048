#include "ops/dnnl_context.h"

#include "base/buffer.h"

namespace bertlab::ops {

DnnlContext& dnnl_context() {
  static DnnlContext ctx;
  return ctx;
}

dnnl::primitive_attr scratchpad_attr(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {
// The calling thread's scratchpad for every primitive it runs (scratchpad_attr), grown to the
// largest one asked for.
void* shared_scratchpad(size_t bytes) {
  thread_local AlignedBuffer<std::byte> buffer;
  if (buffer.size() < bytes) buffer = AlignedBuffer<std::byte>(bytes);
  return buffer.data();
}
}  // namespace

dnnl::memory wrap(const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, dnnl_context().engine, const_cast<void*>(data));
}

const std::unordered_map<int, dnnl::memory>& PrimitiveArgs::bind(std::initializer_list<Arg> args) {
  for (const auto& a : args) {
    auto it = map_.find(a.id);
    if (it == map_.end())
      map_.emplace(a.id, wrap(a.md, a.data));
    else if (it->second.get_data_handle() != a.data)
      it->second.set_data_handle(const_cast<void*>(a.data));
  }
  return map_;
}

void PrimitiveArgs::execute(const dnnl::primitive& p, std::initializer_list<Arg> args) {
  bind(args);
  if (scratch_of_ != p.get()) {  // first call with this primitive: does it take a scratchpad?
    scratch_of_ = p.get();
    map_.erase(DNNL_ARG_SCRATCHPAD);  // another primitive's, with its size
    c_args_.clear();
    const_dnnl_primitive_desc_t pd = nullptr;
    dnnl::error::wrap_c_api(dnnl_primitive_get_primitive_desc(p.get(), &pd), "could not query a primitive");
    const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    scratch_md_ = md ? dnnl::memory::desc(*md) : dnnl::memory::desc();
  }
  if (const size_t bytes = scratch_md_.get_size(); bytes > 0)
    bind({{DNNL_ARG_SCRATCHPAD, scratch_md_, shared_scratchpad(bytes)}});
  if (c_args_.size() != map_.size()) {
    c_args_.clear();
    for (const auto& [id, mem] : map_) c_args_.push_back({id, mem.get()});
  }
  // A stream per calling thread: threads may run primitives side by side (ops::FusedAttention),
  // and the library leaves one stream's use from several threads at once undefined.
  thread_local dnnl::stream stream(dnnl_context().engine);
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), stream.get(), static_cast<int>(c_args_.size()),
                                                 c_args_.data()),
                          "could not execute a primitive");
  stream.wait();
}

}  // namespace bertlab::ops

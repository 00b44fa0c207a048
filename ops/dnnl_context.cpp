#include "ops/dnnl_context.h"

namespace bertlab::ops {

DnnlContext& dnnl_context() {
  static DnnlContext ctx;
  return ctx;
}

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
  if (c_args_.size() != map_.size()) {
    c_args_.clear();
    for (const auto& [id, mem] : map_) c_args_.push_back({id, mem.get()});
  }
  auto& ctx = dnnl_context();
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), ctx.stream.get(),
                                                 static_cast<int>(c_args_.size()), c_args_.data()),
                          "could not execute a primitive");
  ctx.stream.wait();
}

}  // namespace bertlab::ops

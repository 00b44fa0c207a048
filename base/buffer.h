#pragma once
// 64-byte aligned, uninitialised storage for arenas.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace bertlab {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count) : size_(count) {
    size_t bytes = ((count * sizeof(T) + 63) / 64) * 64;
    if (bytes == 0) return;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    data_.reset(static_cast<T*>(p));
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return data_.get()[i]; }
  const T& operator[](size_t i) const { return data_.get()[i]; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t size_ = 0;
};

}  // namespace bertlab

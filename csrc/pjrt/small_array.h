// A fixed-size array that lives on the stack when it has at most N elements
// and on the heap otherwise: the argument and output lists of a program launch,
// which are a few entries on every call but occasionally hundreds (a fused
// graph's parameters). Torch-free, so csrc/pjrt and csrc/hlo can use it.
#pragma once

#include <cstddef>
#include <vector>

namespace tpu::pjrt {

template <typename T, size_t N>
class SmallArray {
 public:
  // `n` elements, each `fill`.
  explicit SmallArray(size_t n, const T& fill = T()) : size_(n) {
    if (n > N) {
      heap_.assign(n, fill);
      data_ = heap_.data();
    } else {
      for (size_t i = 0; i < n; ++i) stack_[i] = fill;
      data_ = stack_;
    }
  }
  // data_ points into the object itself: neither copyable nor movable.
  SmallArray(const SmallArray&) = delete;
  SmallArray& operator=(const SmallArray&) = delete;

  size_t size() const { return size_; }
  bool on_stack() const { return data_ == stack_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }

 private:
  T stack_[N];
  std::vector<T> heap_;
  T* data_;
  size_t size_;
};

}  // namespace tpu::pjrt

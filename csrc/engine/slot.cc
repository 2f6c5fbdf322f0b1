#include "engine/slot.h"

#include <atomic>

#include "engine/runtime.h"

namespace tpu::engine {

size_t elem_size(hlo::ElemType t) {
  int bits = hlo::bit_width(t);
  return bits <= 8 ? 1 : static_cast<size_t>(bits / 8);
}

uint64_t reserve_address(int64_t nbytes) {
  // Start far from any host heap so that a stray dereference faults loudly;
  // 256-byte spacing keeps every storage aligned like a CUDA allocation.
  static std::atomic<uint64_t> next{uint64_t(1) << 44};
  uint64_t size = (static_cast<uint64_t>(nbytes) + 255) & ~uint64_t(255);
  if (size == 0) size = 256;
  return next.fetch_add(size);
}

int64_t Slot::length() const {
  return buffer_ ? nbytes_ / static_cast<int64_t>(elem_size(elem_)) : 0;
}

void Slot::set_buffer(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem) {
  int64_t bytes = buf ? nbytes_ : 0;
  if (bytes != accounted_) {
    if (accounted_) Runtime::get().note_free(device_, accounted_);
    if (bytes) Runtime::get().note_alloc(device_, bytes);
    accounted_ = bytes;
  }
  buffer_ = std::move(buf);
  elem_ = elem;
}

void Slot::reset(int64_t nbytes, uint64_t address, std::shared_ptr<pjrt::Buffer> buf,
                 hlo::ElemType elem) {
  set_buffer(nullptr, elem);
  nbytes_ = nbytes;
  address_ = address;
  set_buffer(std::move(buf), elem);
}

Slot::~Slot() {
  if (accounted_) Runtime::get().note_free(device_, accounted_);
}

}  // namespace tpu::engine

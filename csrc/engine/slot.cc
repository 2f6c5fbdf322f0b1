#include "engine/slot.h"

#include <atomic>
#include <stdexcept>

#include "engine/runtime.h"

namespace tpu::engine {

namespace {
std::atomic<FlushHook> g_flush{nullptr};
}

void set_flush_hook(FlushHook hook) { g_flush = hook; }

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

int64_t Slot::raw_length() const {
  return (pending_ || raw_has_buffer()) ? nbytes_ / static_cast<int64_t>(elem_size(elem_)) : 0;
}

void Slot::flush() {
  FlushHook hook = g_flush.load();
  if (!hook) throw std::logic_error("torch_tpu: pending tpu value without a pending graph");
  hook(this);
  if (pending_) throw std::logic_error("torch_tpu: the pending graph did not produce a value");
}

void Slot::store(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem) {
  std::shared_ptr<pjrt::Buffer> old;  // released outside the lock
  std::lock_guard<std::mutex> g(mu_);
  int64_t bytes = buf ? nbytes_ : 0;
  if (bytes != accounted_) {
    if (accounted_) Runtime::get().note_free(device_, accounted_);
    if (bytes) Runtime::get().note_alloc(device_, bytes);
    accounted_ = bytes;
  }
  old = std::move(buffer_);
  buffer_ = std::move(buf);
  elem_ = elem;
}

void Slot::set_buffer(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem) {
  // Run pending work first: it may still read or write this storage.
  materialize();
  store(std::move(buf), elem);
}

void Slot::fulfil(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem) {
  // The buffer first: a reader on another thread that sees the mark cleared
  // must find the value.
  store(std::move(buf), elem);
  drop_pending();
}

void Slot::drop_pending() {
  std::shared_ptr<void> owner;  // released outside the lock (it may be the last reference)
  std::lock_guard<std::mutex> g(mu_);
  pending_ = false;
  owner = std::move(owner_);
}

void Slot::reset(int64_t nbytes, uint64_t address, std::shared_ptr<pjrt::Buffer> buf,
                 hlo::ElemType elem) {
  materialize();
  store(nullptr, elem);
  nbytes_ = nbytes;
  address_ = address;
  store(std::move(buf), elem);
}

Slot::~Slot() {
  if (accounted_) Runtime::get().note_free(device_, accounted_);
}

}  // namespace tpu::engine

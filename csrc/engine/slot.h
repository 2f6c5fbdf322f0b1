// A storage's device-side state: one Slot per PyTorch storage.
//
// PJRT buffers are immutable, so a Slot is the mutable cell: an in-place op
// computes the new contents and swaps the buffer; every view of the storage sees
// the change because views share the Slot. The buffer is a rank-1 array of the
// element type that last wrote the whole storage (elements = nbytes / size).
// A Slot with no buffer is uninitialised memory (torch.empty) and reads as zeros.
//
// Defer & Fuse: a Slot may instead hold a *pending* value, computed by ops
// recorded in the pending graph but not yet run. Every public accessor first
// materialises it (runs the pending graph through the flush hook), so code
// outside the graph never sees a pending Slot. The graph itself uses the
// `pending_*` accessors. Slots are shared-owned: the storage holds one
// reference and the pending graph may hold others; `alive()` turns false when
// the storage dies, which tells the graph that the value need not be output.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "hlo/builder.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

class Slot;
// Runs whatever pending work produces `slot`'s value (installed by the graph).
using FlushHook = void (*)(Slot* slot);
void set_flush_hook(FlushHook hook);

class Slot {
 public:
  Slot(int device, int64_t nbytes, uint64_t address)
      : device_(device), nbytes_(nbytes), address_(address) {}
  ~Slot();

  int device() const { return device_; }
  int64_t nbytes() const { return nbytes_; }
  uint64_t address() const { return address_; }

  bool has_buffer() { materialize(); return raw_has_buffer(); }
  // A reference of its own: another thread may swap the buffer meanwhile.
  std::shared_ptr<pjrt::Buffer> buffer() { materialize(); return raw_buffer(); }
  hlo::ElemType elem() { materialize(); return elem_; }
  int64_t length() { materialize(); return raw_length(); }
  // Replaces the contents; `buf` must be rank 1 with nbytes() bytes.
  void set_buffer(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem);
  // Grows the storage (resize_): the caller supplies the new buffer and address.
  void reset(int64_t nbytes, uint64_t address, std::shared_ptr<pjrt::Buffer> buf,
             hlo::ElemType elem);

  // ---- for the pending graph ----
  bool pending() const { return pending_; }
  // Marks the contents as a pending value of element type `elem` computed by
  // `owner`'s trace (opaque here), which a read from any thread then runs.
  void set_pending(hlo::ElemType elem, const std::shared_ptr<void>& owner) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (owner_ != owner) owner_ = owner;
    }
    elem_ = elem;
    pending_ = true;
  }
  // The trace whose pending value this is (null when not pending).
  std::shared_ptr<void> pending_owner() const {
    std::lock_guard<std::mutex> g(mu_);
    return pending_ ? owner_ : nullptr;
  }
  // Binds the graph's result and clears the pending mark.
  void fulfil(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem);
  void drop_pending();
  hlo::ElemType raw_elem() const { return elem_; }
  bool raw_has_buffer() const {
    std::lock_guard<std::mutex> g(mu_);
    return buffer_ != nullptr;
  }
  std::shared_ptr<pjrt::Buffer> raw_buffer() const {
    std::lock_guard<std::mutex> g(mu_);
    return buffer_;
  }
  int64_t raw_length() const;  // elements, of the buffer or the pending value

  bool alive() const { return alive_; }
  void mark_dead() { alive_ = false; }

 private:
  void materialize() {
    if (pending_) flush();
  }
  void flush();
  void store(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem);

  int device_;
  int64_t nbytes_;
  uint64_t address_;
  // Guards buffer_ and accounted_: threads share storages (a model's weights),
  // and copying a shared_ptr while another thread assigns it is a data race.
  mutable std::mutex mu_;
  std::shared_ptr<pjrt::Buffer> buffer_;
  std::shared_ptr<void> owner_;  // the trace of the pending value (guarded by mu_)
  std::atomic<hlo::ElemType> elem_{hlo::ElemType::U8};
  int64_t accounted_ = 0;  // bytes reported to Runtime's memory accounting
  std::atomic<bool> pending_{false};
  std::atomic<bool> alive_{true};
};

// Unique synthetic device addresses: data_ptr() of a tpu tensor is never
// dereferenced, but aliasing checks and pointer arithmetic need distinct,
// stable, correctly spaced values.
uint64_t reserve_address(int64_t nbytes);

size_t elem_size(hlo::ElemType t);

}  // namespace tpu::engine

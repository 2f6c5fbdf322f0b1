// A storage's device-side state: one Slot per PyTorch storage.
//
// PJRT buffers are immutable, so a Slot is the mutable cell: an in-place op
// computes the new contents and swaps `buffer`; every view of the storage sees
// the change because views share the Slot. The buffer is a rank-1 array of the
// element type that last wrote the whole storage (elements = nbytes / size).
// A Slot with no buffer is uninitialised memory (torch.empty) and reads as zeros.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "hlo/builder.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

class Slot {
 public:
  Slot(int device, int64_t nbytes, uint64_t address)
      : device_(device), nbytes_(nbytes), address_(address) {}
  ~Slot();

  int device() const { return device_; }
  int64_t nbytes() const { return nbytes_; }
  uint64_t address() const { return address_; }

  bool has_buffer() const { return buffer_ != nullptr; }
  const std::shared_ptr<pjrt::Buffer>& buffer() const { return buffer_; }
  hlo::ElemType elem() const { return elem_; }
  int64_t length() const;  // elements of the buffer
  // Replaces the contents; `buf` must be rank 1 with nbytes() bytes.
  void set_buffer(std::shared_ptr<pjrt::Buffer> buf, hlo::ElemType elem);
  // Grows the storage (resize_): the caller supplies the new buffer and address.
  void reset(int64_t nbytes, uint64_t address, std::shared_ptr<pjrt::Buffer> buf,
             hlo::ElemType elem);

 private:
  int device_;
  int64_t nbytes_;
  uint64_t address_;
  std::shared_ptr<pjrt::Buffer> buffer_;
  hlo::ElemType elem_ = hlo::ElemType::U8;
  int64_t accounted_ = 0;  // bytes reported to Runtime's memory accounting
};

// Unique synthetic device addresses: data_ptr() of a tpu tensor is never
// dereferenced, but aliasing checks and pointer arithmetic need distinct,
// stable, correctly spaced values.
uint64_t reserve_address(int64_t nbytes);

size_t elem_size(hlo::ElemType t);

}  // namespace tpu::engine

// Host <-> device transfers beyond the basic ones of pjrt.h: uploads that may
// alias host memory instead of copying it, and partial device -> host copies.
// Used by host-staged collectives (csrc/dist), where these copies are the cost.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "pjrt/pjrt.h"

namespace tpu::pjrt {

// Client::buffer_from_host without the copy where the plugin can alias host
// memory (the CPU plugin, for 16-byte aligned dense data: kImmutableZeroCopy).
// The caller keeps `data` alive and unchanged until `done` runs (on any
// thread): once the buffer no longer needs it, which is when the buffer is
// freed if it aliases `data`, at once if the plugin copied.
std::shared_ptr<Buffer> buffer_from_host_zero_copy(const Client& client, const void* data,
                                                   PJRT_Buffer_Type type,
                                                   const std::vector<int64_t>& dims, int device,
                                                   std::function<void()> done);

// Starts copying `size` bytes from byte `offset` of `buf`'s dense contents into
// `dst`; the event fires when done (and carries the producer's failure). Null
// when the plugin has no partial copies (use Buffer::to_host then).
std::unique_ptr<Event> copy_raw_to_host(const Client& client, const Buffer& buf, void* dst,
                                        int64_t offset, int64_t size);

// `buf`'s dense bytes where the plugin keeps them in this process's memory
// (the CPU plugin: device memory is host memory), for a reader that copies
// them itself instead of through the plugin's transfer path. `data` stays
// valid while `hold` lives (an external reference: the plugin neither frees
// nor moves the memory meanwhile). The buffer must be ready. Null `data` when
// the plugin lacks the entries or the memory is not host memory.
struct HostView {
  const void* data = nullptr;
  std::shared_ptr<void> hold;
};
HostView host_view(const Client& client, const Buffer& buf);

// Buffer::to_host without the wait: starts copying the whole buffer (dense,
// row-major; `nbytes` must equal its size) into `dst` and returns the event
// that fires once it has landed, carrying the producer's failure (null when
// `nbytes` is 0: there is nothing to copy). Unlike
// copy_raw_to_host it is safe on a buffer whose program still runs. Starting
// several before awaiting any lets a reader of many small buffers wait once.
std::unique_ptr<Event> start_copy_to_host(const Client& client, const Buffer& buf, void* dst,
                                          size_t nbytes);

}  // namespace tpu::pjrt

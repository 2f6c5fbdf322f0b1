// Device buffers that alias host memory instead of holding a copy of it (where
// the platform can: the CPU plugin), for host-staged collectives whose results
// are already in host memory nobody writes again.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/host_transfer.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

// upload() without the copy where the platform can alias host memory: `keep`
// owns `data`, which must stay unchanged while the buffer may read it; it is
// released once the buffer no longer needs it (when the buffer is freed, or
// at once if the plugin copied after all).
std::shared_ptr<pjrt::Buffer> upload_aliasing(const void* data, hlo::ElemType elem,
                                              const std::vector<int64_t>& dims, int device,
                                              std::shared_ptr<void> keep);

// Starts copying bytes [offset, offset + size) of `buf` to `dst`; null when the
// platform has no partial copies.
std::unique_ptr<pjrt::Event> download_part(const pjrt::Buffer& buf, void* dst, int64_t offset,
                                           int64_t size);

// A ready buffer's bytes readable in place (the CPU plugin keeps device
// memory in host memory), for host-staged collectives that copy pieces of it
// themselves, without the plugin's transfer path and its thread hop. Waits for
// the buffer (its producer's failure raised as a read would raise it). Null
// `data` where the platform has no host-addressable buffers; then use
// download_part or download. `nbytes` (what the caller will read) counts as
// a device-to-host transfer. TORCH_TPU_DIST_HOST_VIEW=0 turns it off.
pjrt::HostView readable_host_view(const pjrt::Buffer& buf, size_t nbytes);

// readable_host_view for a writer: a host-staged collective that reduces a
// buffer where it lies (no copy out, no copy back). PJRT buffers are
// immutable, so programs read them without any ordering against a writer:
// besides the buffer's producer, this waits for every piece of work launched
// on `device` so far (the buffer's readers among them; PJRT's C API does not
// say which). The caller must make sure that nothing else holds or will read
// the buffer while it writes (no other Slot, pending trace or compiled trace;
// see csrc/dist/in_place_reduce.h). Null `data` where the platform has no
// host-addressable buffers or TORCH_TPU_DIST_HOST_VIEW=0.
pjrt::HostView writable_host_view(const pjrt::Buffer& buf, int device);

}  // namespace tpu::engine

// Device buffers that alias host memory instead of holding a copy of it (where
// the platform can: the CPU plugin), for host-staged collectives whose results
// are already in host memory nobody writes again.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hlo/builder.h"
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

}  // namespace tpu::engine

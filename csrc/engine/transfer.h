// Host <-> device copies with metrics, and the element-type mapping between
// the hlo and pjrt layers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hlo/builder.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

PJRT_Buffer_Type to_pjrt(hlo::ElemType t);
hlo::ElemType from_pjrt(PJRT_Buffer_Type t);

std::shared_ptr<pjrt::Buffer> upload(const void* data, hlo::ElemType elem,
                                     const std::vector<int64_t>& dims, int device);
// A rank-1 zero-filled buffer of `n` elements. Small ones are shared: programs
// make new buffers rather than write their inputs, and the one in-place writer
// (a collective, engine::writable_host_view) writes only a buffer its storage
// holds alone, which the cache's own reference rules out for these. So one zero
// buffer serves every fresh storage of that type, length and device. A
// storage's first zeros (an out= tensor, torch.zeros, torch.empty read before
// it is written) then cost no transfer, which on the CPU plugin waits for a
// worker thread: up to a millisecond on a loaded machine, on the recording path
// of Defer & Fuse's first op of every step (arange.start_out).
std::shared_ptr<pjrt::Buffer> zeros(hlo::ElemType elem, int64_t n, int device);
void download(const pjrt::Buffer& buf, void* dst, size_t nbytes);

}  // namespace tpu::engine

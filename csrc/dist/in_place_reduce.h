// Reducing a tpu tensor where it lies: on a platform whose device memory is
// host memory (the CPU plugin), Gloo can run an allreduce straight on the
// tensor's device buffer, with no copy to a staging block and no copy back
// into a new buffer (at 64 MB those two copies cost as much as Gloo's own
// reduction).
//
// PJRT buffers are immutable to everyone else, so this is done only where
// writing one cannot be seen by anything but the tensor's own storage:
//   - the tensor is contiguous, has no lazy conj/neg bit and is its storage's
//     whole buffer (a view of part of a larger storage is not: writing the
//     whole buffer through it is fine, but Gloo would reduce only the view's
//     part and the rest must stay as is; today's staged path handles it);
//   - the storage's Slot holds the only reference to the buffer besides ours
//     (no other Slot shares it, no pending Defer & Fuse trace of another
//     thread took it as a parameter, no compiled trace keeps it, and it is
//     not one of engine::zeros' shared zero buffers);
//   - every program and transfer launched on the device so far has finished
//     (some may still read the buffer; writes never race with them).
// All views of the storage share its Slot, so they see the reduced values,
// as they would on CUDA. Reading or writing the tensor before the collective's
// Work completes is a race, as with NCCL.
#pragma once

#include <memory>
#include <optional>

#include <ATen/core/Tensor.h>

namespace tpu::dist {

struct InPlaceHost {
  // A CPU tensor over t's device memory (t's sizes and dtype); Gloo writes it.
  at::Tensor host;
  // Keeps the memory where it is (PJRT's external reference) until released,
  // which must be once the collective is done with `host`.
  std::shared_ptr<void> hold;
};

// A writable host alias of `t`'s device buffer when the conditions above
// hold, after flush_pending_work(); nullopt otherwise (use the staged path).
// TORCH_TPU_DIST_IN_PLACE=0 (or TORCH_TPU_DIST_HOST_VIEW=0) turns it off.
std::optional<InPlaceHost> in_place_host(const at::Tensor& t);

// How often in_place_host answered with an alias (`in_place`) and how often
// it declined a tensor on the tpu device (`declined`), for tests.
struct InPlaceStats {
  int64_t in_place = 0;
  int64_t declined = 0;
};
InPlaceStats in_place_stats();

}  // namespace tpu::dist

// Host <-> tpu copies for callers that manage the host memory themselves
// (host-staged collectives, csrc/dist): into a caller's buffer, from the device
// buffer in parts, and back by aliasing instead of copying. copy_kernels.cc.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>

#include "pjrt/pjrt.h"

namespace tpu::aten {

// to_host (kernels.h) into `out`, a contiguous CPU tensor of self's dtype and
// numel (a caller's reused buffer: no allocation).
void to_host_into(const at::Tensor& self, const at::Tensor& out);
// A device buffer whose dense contents are self's values (its own when self
// covers its storage whole, else a fresh copy), pending work run and device
// checks raised: what a host read copies from.
std::shared_ptr<pjrt::Buffer> dense_buffer_for_host_read(const at::Tensor& self);
// dst <- host where `host` is a CPU tensor nobody writes again: when it is laid
// out as dst's whole storage, dst's buffer aliases it instead of copying it (on
// platforms that can, the CPU plugin); otherwise an ordinary copy_.
void adopt_host_values(const at::Tensor& dst, const at::Tensor& host);

}  // namespace tpu::aten

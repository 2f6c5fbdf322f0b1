// Registration entry points of the hand-written (non-lowering) kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace tpu::aten {

void register_tensor_kernels(torch::Library& m);
void register_copy_kernels(torch::Library& m);
// Registers the generic kernel for every lowered op and the CPU fallback.
void register_all_kernels();

// Grows a tpu storage to `new_nbytes` bytes, keeping its contents.
void resize_storage(const at::Tensor& self, int64_t new_nbytes);
// A dense CPU copy of a tpu tensor (same dtype and sizes).
at::Tensor to_host(const at::Tensor& self);

}  // namespace tpu::aten

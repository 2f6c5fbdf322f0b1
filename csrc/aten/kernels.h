// Registration entry points of the hand-written (non-lowering) kernels.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

namespace tpu::aten {

void register_tensor_kernels(torch::Library& m);
void register_copy_kernels(torch::Library& m);
void register_batch_norm_kernel(torch::Library& m);
// matmul and cross_entropy as one op each where no gradient is recorded
// (no_grad_composites.cc).
void register_no_grad_composites(torch::Library& m);
void register_data_dependent_kernels(torch::Library& m);
// Refuses sparse tensors and sparse embedding gradients (sparse_kernels.cc).
void register_sparse_kernels(torch::Library& m);
// torch.autocast("tpu"): CUDA's cast policy on the AutocastPrivateUse1 key (autocast.cc).
void register_autocast_kernels();
// Registers the generic kernel for every lowered op and the CPU fallback.
void register_all_kernels();
// Registers the generic kernel for the lowered ops of namespace `ns` that are not
// registered yet: a library that defines its ops after torch_tpu loaded (fbgemm's)
// calls it through torch_tpu._C._register_lowered_ops(ns). Returns their names.
std::vector<std::string> register_lowered_ops(const std::string& ns);

// Grows a tpu tensor's storage to `new_nbytes` bytes (no-op when it is that
// large already), keeping its contents (storage_resize.cc).
void resize_storage(const at::Tensor& self, int64_t new_nbytes);
// Resizes a tpu storage to exactly `new_nbytes` bytes in place: contents kept
// up to the smaller size, the rest zeros; 0 frees the device buffer.
void resize_storage_bytes(c10::StorageImpl* st, int64_t new_nbytes);
// The indices of aten::index / index_put_ with boolean masks replaced by the
// long indices they stand for (synchronises on the host), CPU indices moved to `device`.
c10::List<std::optional<at::Tensor>> expand_index_masks(
    const c10::List<std::optional<at::Tensor>>& indices, c10::Device device);
// A dense CPU copy of a tpu tensor (same dtype and sizes).
at::Tensor to_host(const at::Tensor& self);
// A tpu tensor's logical values as a plain tensor: PyTorch's lazy conjugate
// and negative bits (is_conj, is_neg) applied to the data. `t` itself when it
// has neither.
at::Tensor resolve_lazy_bits(const at::Tensor& t);

}  // namespace tpu::aten

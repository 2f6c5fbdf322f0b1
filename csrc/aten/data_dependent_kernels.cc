// Ops whose result shape depends on the data (nonzero, masked_select): a
// compiled program needs static shapes, so these synchronise and size on the
// host -- download the inputs, compute there, upload the result. Like CUDA,
// they are sync points. equal returns a host bool: the comparison runs on the
// device and only its one-element verdict is read back.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/tpu_tensor.h"

namespace tpu::aten {

namespace {

// Checks that `t` lives on the same tpu device as `self` (as the generic kernel does).
void check_same_device(const char* op, const at::Tensor& self, const at::Tensor& t,
                       const char* arg) {
  TORCH_CHECK(t.device() == self.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              self.device(), " and ", t.device(), "! (argument '", arg, "' of ", op,
              "). Move the tensor with .to('", self.device(), "') first.");
}

at::Tensor upload_like(const at::Tensor& host, const at::Tensor& like) {
  at::Tensor out = at::empty(host.sizes(), host.options().device(like.device()));
  if (out.numel() > 0) out.copy_(host);
  return out;
}

at::Tensor nonzero_kernel(const at::Tensor& self) {
  return upload_like(at::nonzero(to_host(self)), self);
}

at::Tensor masked_select_kernel(const at::Tensor& self, const at::Tensor& mask) {
  check_same_device("aten::masked_select", self, mask, "mask");
  return upload_like(at::masked_select(to_host(self), to_host(mask)), self);
}

// equal(self, other): same sizes and every element equal (after type
// promotion, as on CPU; NaN is never equal to itself).
bool equal_kernel(const at::Tensor& self, const at::Tensor& other) {
  check_same_device("aten::equal", self, other, "other");
  if (!self.sizes().equals(other.sizes())) return false;
  return at::eq(self, other).all().item<bool>();
}

}  // namespace

c10::List<std::optional<at::Tensor>> expand_index_masks(
    const c10::List<std::optional<at::Tensor>>& indices, c10::Device device) {
  c10::List<std::optional<at::Tensor>> out;
  for (size_t k = 0; k < indices.size(); ++k) {
    std::optional<at::Tensor> t = indices.get(k);
    if (!t.has_value() || !t->defined()) {
      out.push_back(t);
      continue;
    }
    at::Tensor idx = *t;
    // As on CUDA, index tensors may live on the CPU: they move to the device.
    if (idx.device().is_cpu() && idx.dim() > 0) idx = idx.to(device);
    if (idx.scalar_type() == at::kBool || idx.scalar_type() == at::kByte) {
      // A mask of d dims stands for d long index tensors (PyTorch's expandTensors).
      at::Tensor nz = nonzero_kernel(idx);
      for (int64_t d = 0; d < idx.dim(); ++d) out.push_back(nz.select(1, d));
    } else {
      out.push_back(idx);
    }
  }
  return out;
}

void register_data_dependent_kernels(torch::Library& m) {
  m.impl("nonzero", TORCH_FN(nonzero_kernel));
  m.impl("masked_select", TORCH_FN(masked_select_kernel));
  m.impl("equal", TORCH_FN(equal_kernel));
}

}  // namespace tpu::aten

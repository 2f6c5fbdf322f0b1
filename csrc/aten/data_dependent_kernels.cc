// Ops whose result shape depends on the data (nonzero, masked_select,
// bincount): a
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

// bincount(self, weights, minlength): counts (or summed weights) of each value
// of a 1-d non-negative integer tensor, in max(minlength, max + 1) bins. The
// size is data-dependent, so like nonzero this reads to the host: the input's
// min and max, one two-element read, which is also where a negative value is
// refused (exactly, before anything is counted); the counting itself is an
// index_add_ on the device (whose index check can then never fire).
at::Tensor bincount_kernel(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt,
                           int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "bincount: minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  at::Tensor weights = weights_opt.has_value() ? *weights_opt : at::Tensor();
  at::ScalarType out_type = at::kLong;
  if (weights.defined()) {
    check_same_device("aten::bincount", self, weights, "weights");
    TORCH_CHECK(weights.dim() == 1 && weights.size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
    out_type = c10::isFloatingType(weights.scalar_type()) ? weights.scalar_type() : at::kDouble;
  }
  int64_t bins = minlength;
  if (self.numel() > 0) {
    at::Tensor range = to_host(at::stack({self.min(), self.max()}).to(at::kLong));
    const int64_t* mm = range.const_data_ptr<int64_t>();
    TORCH_CHECK(mm[0] >= 0, "bincount only supports 1-d non-negative integral inputs.");
    bins = std::max(bins, mm[1] + 1);
  }
  at::Tensor out = at::zeros({bins}, self.options().dtype(out_type));
  if (self.numel() == 0) return out;
  at::Tensor add = weights.defined() ? weights.to(out_type) : at::ones_like(self, out_type);
  return out.index_add_(0, self.to(at::kLong), add);
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
  m.impl("bincount", TORCH_FN(bincount_kernel));
}

}  // namespace tpu::aten

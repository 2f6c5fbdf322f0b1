// native_batch_norm writes running_mean / running_var in training mode, but its
// schema does not mark them as written, so the generic kernel (which writes
// back only annotated arguments) cannot serve it. Route it to the
// _native_batch_norm_legit family, whose schemas say what they write and whose
// lowerings live in csrc/lower/norm.cc.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/kernels.h"

namespace tpu::aten {

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  bool stats = running_mean.has_value() && running_mean->defined() && running_var.has_value() &&
               running_var->defined();
  if (!training) {
    TORCH_CHECK(stats, "batch_norm: running_mean and running_var must be defined in eval mode");
    return at::_native_batch_norm_legit_no_training(input, weight, bias, *running_mean,
                                                    *running_var, momentum, eps);
  }
  if (stats) {
    at::Tensor rm = *running_mean, rv = *running_var;
    return at::_native_batch_norm_legit(input, weight, bias, rm, rv, true, momentum, eps);
  }
  return at::_native_batch_norm_legit(input, weight, bias, true, momentum, eps);
}

}  // namespace

void register_batch_norm_kernel(torch::Library& m) {
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
}

}  // namespace tpu::aten

// native_batch_norm writes running_mean / running_var in training mode, but its
// schema does not mark them as written, so the generic kernel (which writes
// back only annotated arguments) cannot serve it. Route it to the
// _native_batch_norm_legit family, whose schemas say what they write and whose
// lowerings live in csrc/lower/norm.cc.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/op_kernel.h"

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

// In eval mode PyTorch's CPU (and CUDA) kernels return empty save_mean /
// save_invstd, while the meta kernels (which size the generic kernel's results)
// say [C]. The generic kernel computes the op; the saved statistics are then
// replaced by what the reference backends return. The backward in eval mode
// reads the running statistics, never these.
void legit_batch_norm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  bool training = false;
  if (schema.name() == "aten::_native_batch_norm_legit") {
    const size_t at = schema.overload_name() == "no_stats" ? 3 : 5;
    training = (*stack)[stack->size() - nargs + at].toBool();
  }
  op_kernel(op, stack);
  if (training) return;
  const auto options = (*stack)[stack->size() - 3].toTensor().options();
  (*stack)[stack->size() - 2] = at::empty({0}, options);
  (*stack)[stack->size() - 1] = at::empty({0}, options);
}

}  // namespace

void register_batch_norm_kernel(torch::Library& m) {
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  for (const char* name : {"_native_batch_norm_legit", "_native_batch_norm_legit.no_stats",
                           "_native_batch_norm_legit_no_training"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&legit_batch_norm>());
}

}  // namespace tpu::aten

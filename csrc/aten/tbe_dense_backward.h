// The backward of fbgemm's dense TBE lookup (dense_embedding_codegen_lookup_function) on
// tpu: the tables' gradient from the lookup's own arguments, through the lowered
// tpu::tbe_dense_backward op (defined in fbgemm_kernels.cc, lowered in
// csrc/lower/tbe.cc). Both autograd kernels that run that lookup use it: the dense one
// (fbgemm_kernels.cc) and the fused-optimizer one (tbe_fused_kernels.cc).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace tpu::aten {

// Positions in dense_embedding_codegen_lookup_function's schema.
enum TbeDenseLookupArg {
  kWeights = 0, kWeightsOffsets = 1, kDOffsets = 2, kMaxD = 4, kHashSizeCumsum = 5,
  kIndices = 7, kOffsets = 8, kPoolingMode = 9, kIndiceWeights = 10
};

// The gradient of the lookup's weights (its kWeights argument's layout) given the
// gradient of its pooled output and its arguments in schema order.
inline at::Tensor tbe_dense_lookup_weights_grad(const at::Tensor& grad_output,
                                                c10::ArrayRef<c10::IValue> lookup_args) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("tpu::tbe_dense_backward", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, const at::Tensor&, int64_t,
                                         const at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, int64_t,
                                         const std::optional<at::Tensor>&)>();
  const auto& a = lookup_args;
  std::optional<at::Tensor> per_sample_weights;
  if (!a[kIndiceWeights].isNone()) per_sample_weights = a[kIndiceWeights].toTensor();
  return op.call(grad_output.contiguous(), a[kWeights].toTensor(),
                 a[kWeightsOffsets].toTensor(), a[kDOffsets].toTensor(), a[kMaxD].toInt(),
                 a[kHashSizeCumsum].toTensor(), a[kIndices].toTensor(),
                 a[kOffsets].toTensor(), a[kPoolingMode].toInt(), per_sample_weights);
}

}  // namespace tpu::aten

// Sparse tensors are refused on tpu with an error that says what to use instead.
//
// XLA has no sparse layouts, so a sparse tpu tensor could only be a dense one in
// disguise. Users meet sparse tensors mostly through sparse embedding gradients
// (nn.Embedding / nn.EmbeddingBag(sparse=True) with SGD, Adagrad or SparseAdam);
// the dense gradient (sparse=False, the default) trains the same model with the
// same optimizers (SparseAdam -> Adam), so every refusal names it.
//  - A fallback on the SparsePrivateUse1 key catches every op that would make or
//    read a sparse tpu tensor (nn.Embedding(sparse=True)'s backward builds one
//    with _sparse_coo_tensor_with_dims_and_tensors; torch.sparse_coo_tensor(...,
//    device="tpu") too) instead of PyTorch's "could not run ... Sparsetpu".
//  - _embedding_bag_backward takes `sparse` as a flag: its lowering computes the
//    dense gradient, so without this check sparse=True would silently give a
//    dense one (and Defer & Fuse's meta pass would fail inside PyTorch's sparse
//    meta kernel). The check runs first; the lowering serves sparse=False.
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/op_info.h"
#include "aten/op_kernel.h"

namespace tpu::aten {

namespace {

constexpr const char* kDense =
    "Use dense gradients instead: nn.Embedding / nn.EmbeddingBag(..., sparse=False) (the "
    "default) or F.embedding(..., sparse=False); SGD and Adagrad take dense gradients as they "
    "are, and torch.optim.Adam replaces SparseAdam.";

[[noreturn]] void refuse(const std::string& what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_tpu: ", what, " (XLA has no sparse layouts). ", kDense);
}

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack*) {
  refuse("sparse tensors are not supported on tpu (" + full_name(op.schema().operator_name()) +
         " was called with one; .to_dense() before moving a sparse tensor to tpu)");
}

void embedding_bag_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size,
  //   maximum_indices, num_weights, scale_grad_by_freq, mode, sparse, ...)
  const auto& args = op.schema().arguments();
  const size_t base = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name() == "sparse" && (*stack)[base + i].toBool())
      refuse("sparse embedding gradients (nn.EmbeddingBag(sparse=True)) are not supported on tpu");
  op_kernel(op, stack);
}

}  // namespace

void register_sparse_kernels(torch::Library& m) {
  m.impl("_embedding_bag_backward", torch::CppFunction::makeFromBoxedFunction<&embedding_bag_backward>());
  auto* fallback = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::SparsePrivateUse1,
                                      __FILE__, __LINE__);
  fallback->fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

}  // namespace tpu::aten

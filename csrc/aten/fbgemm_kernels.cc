// The tpu kernels of fbgemm ops (TorchRec) that need more than the generic kernel.
// Their lowerings are csrc/lower/jagged.cc and csrc/lower/tbe.cc.
//
// - permute_{1D,2D}_sparse_data without permuted_lengths_sum: the result's length is
//   the sum of the permuted lengths, which is data. The kernel reads it (one sync,
//   as fbgemm's CUDA kernel does) and hands the op, with the sum filled in, to the
//   generic kernel; the lowering then checks that the lengths really sum to it.
// - dense_embedding_codegen_lookup_function: fbgemm registers it for CPU/CUDA only,
//   with its autograd inside those kernels, so a tpu call has no backward. This
//   AutogradPrivateUse1 kernel is its autograd: forward is the lowered op, backward
//   the lowered tpu::tbe_dense_backward (dev_weights' gradient). Tables that TorchRec
//   keeps on the CPU (its sharded modules do on any device but CUDA/MTIA) are looked
//   up there by fbgemm, and the pooled result moves to the device.
//
// fbgemm's library loads after torch_tpu, so these (boxed) kernels are registered by
// name before fbgemm defines the ops (the dispatcher keeps them until it does).
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/op_kernel.h"
#include "aten/python_site.h"
#include "aten/tbe_dense_backward.h"
#include "engine/metrics.h"

TORCH_LIBRARY_FRAGMENT(tpu, m) {
  m.def(
      "tbe_dense_backward(Tensor grad_output, Tensor dev_weights, Tensor weights_offsets, "
      "Tensor D_offsets, int max_D, Tensor hash_size_cumsum, Tensor indices, Tensor offsets, "
      "int pooling_mode, Tensor? indice_weights) -> Tensor");
}

namespace tpu::aten {
namespace {

at::Tensor tbe_dense_backward_meta(const at::Tensor&, const at::Tensor& dev_weights,
                                   const at::Tensor&, const at::Tensor&, int64_t,
                                   const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   int64_t, const std::optional<at::Tensor>&) {
  return at::empty_like(dev_weights, dev_weights.options().device(c10::kMeta));
}

void permute_sparse_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (permute, lengths, values, weights, permuted_lengths_sum)
  c10::IValue& total = (*stack)[stack->size() - 1];
  if (total.isNone()) {
    const at::Tensor& permute = (*stack)[stack->size() - 5].toTensor();
    const at::Tensor& lengths = (*stack)[stack->size() - 4].toTensor();
    TORCH_CHECK(permute.dim() == 1 && !permute.is_floating_point(), op.schema().name(),
                ": permute must be a 1-D integer tensor");
    // index_select checks the permute indices on the device.
    total = c10::IValue(lengths.index_select(0, permute.to(at::kLong)).sum().item<int64_t>());
  }
  op_kernel(op, stack);
}

class TbeDenseLookup : public torch::autograd::Function<TbeDenseLookup> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor dev_weights,
                            const c10::OperatorHandle* op, torch::jit::Stack args) {
    at::AutoDispatchBelowADInplaceOrView below;
    torch::jit::Stack s = args;
    s[kWeights] = dev_weights;
    op->redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &s);
    ctx->saved_data["args"] = c10::ivalue::Tuple::create(std::move(args));
    return s.at(0).toTensor();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto& a = ctx->saved_data["args"].toTupleRef().elements();
    return {tbe_dense_lookup_weights_grad(grads[0], a), at::Tensor(), at::Tensor()};
  }
};

void tbe_dense_autograd_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  size_t n = op.schema().arguments().size();
  torch::jit::Stack args(stack->end() - n, stack->end());
  torch::jit::drop(*stack, n);
  if (!args[kIndiceWeights].isNone()) {
    TORCH_CHECK(!args[kIndiceWeights].toTensor().requires_grad(), op.schema().name(),
                ": gradients for per-sample weights are not supported on tpu");
  }
  at::Tensor w = args[kWeights].toTensor();
  if (w.device().is_cpu()) {
    // The tables are on the CPU: TorchRec builds its TBE modules there for every
    // device but CUDA and MTIA (fbgemm's use_cpu). The lookup then runs there, with
    // fbgemm's own kernel and autograd, and its result comes back to the device.
    // It is CPU work: counted and reported as a CPU-fallback op.
    std::string name = "fbgemm::dense_embedding_codegen_lookup_function";
    if (engine::metrics().note_fallback(name)) {
      engine::metrics().note_fallback_site(name, python_site());
      TORCH_WARN("torch_tpu: ", name, " runs on the CPU because its tables (dev_weights) are "
                 "there: TorchRec builds TBE tables on the CPU for devices other than CUDA/MTIA. "
                 "Move the module to tpu to look up on the device.");
    }
    c10::Device dev = args[kIndices].toTensor().device();
    for (auto& a : args)
      if (a.isTensor() && a.toTensor().defined() && !a.toTensor().device().is_cpu())
        a = a.toTensor().cpu();
    op.callBoxed(&args);
    stack->push_back(args.at(0).toTensor().to(dev));
    return;
  }
  // fbgemm keeps its index buffers (weights_offsets, D_offsets, hash_size_cumsum) on
  // the CPU unless the module is on CUDA; they are small: copy them to the device.
  for (auto& a : args)
    if (a.isTensor() && a.toTensor().defined() && a.toTensor().device().is_cpu())
      a = a.toTensor().to(w.device());
  stack->push_back(TbeDenseLookup::apply(w, &op, std::move(args)));
}

}  // namespace

void register_fbgemm_kernels() {
  static auto* meta = new torch::Library(torch::Library::IMPL, "tpu", c10::DispatchKey::Meta,
                                         __FILE__, __LINE__);
  meta->impl("tbe_dense_backward", TORCH_FN(tbe_dense_backward_meta));
  static auto* lib = new torch::Library(torch::Library::IMPL, "fbgemm",
                                        c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  lib->impl("permute_2D_sparse_data", torch::CppFunction::makeFromBoxedFunction<&permute_sparse_kernel>());
  lib->impl("permute_1D_sparse_data", torch::CppFunction::makeFromBoxedFunction<&permute_sparse_kernel>());
  static auto* ad = new torch::Library(torch::Library::IMPL, "fbgemm",
                                       c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  ad->impl("dense_embedding_codegen_lookup_function",
           torch::CppFunction::makeFromBoxedFunction<&tbe_dense_autograd_kernel>());
}

}  // namespace tpu::aten

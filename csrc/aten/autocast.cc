// torch.autocast("tpu"): CUDA's cast policy registered for PrivateUse1's
// autocast dispatch key (AutocastPrivateUse1).
//
// The op lists and the cast wrappers are PyTorch's own (ATen/autocast_mode.h:
// AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, ... and at::autocast::WrapFunction,
// which CUDA's registration in autocast_mode.cpp expands too), so the policy
// cannot drift from CUDA's when PyTorch changes it. The wrappers cast their
// tensor arguments (through the autocast weight cache) and redispatch below
// the autocast key, where the ops run through the lowerings as usual: Strict
// Eager, Defer & Fuse and the compiled mode (AOTAutograd traces the casts) see
// nothing but ordinary ops.
//
// Two entries of CUDA's registration are left out: cudnn_convolution and
// cudnn_convolution_transpose are cuDNN kernels that no tpu tensor reaches.
// tests/amp/test_autocast_policy.py checks that the registered set is CUDA's
// minus those two.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "aten/kernels.h"
#include "aten/torch_compat.h"

namespace tpu::aten {

namespace {

// CUDA refuses binary_cross_entropy under autocast (its float16 inputs, coming
// from a sigmoid, lose too much); tpu does the same, so code written for CUDA
// fails the same way here instead of training with a silently worse loss.
at::Tensor binary_cross_entropy_refused(const at::Tensor&, const at::Tensor&,
                                        const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast (the same rule as on CUDA): combine the sigmoid and the loss with "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
              "which autocast runs in float32, or compute the loss outside the autocast region.");
}

}  // namespace

void register_autocast_kernels() {
  // Every op outside the policy passes straight through to the backend.
  auto* fallthrough = new torch::Library(torch::Library::IMPL, "_",
                                         c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  fallthrough->fallback(torch::CppFunction::makeFallthrough());

  // The macros below expand to m.impl(...) calls.
  auto& m = *new torch::Library(torch::Library::IMPL, "aten",
                                c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
#define TPU_AUTOCAST_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOWER_PRECISION_FP)
#undef TPU_AUTOCAST_LOWER_PRECISION_FP

#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
#undef TPU_AUTOCAST_FP32

#define TPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_SET_OPT_DTYPE)
#undef TPU_AUTOCAST_FP32_SET_OPT_DTYPE

  {
    // The signatures in this list are spelled for code inside namespace at (and name
    // types that only some torch releases have: torch_compat.h).
    using namespace tpu::compat::autocast_signature_names;
    using at::IntArrayRef;
    using at::Scalar;
    using at::ScalarType;
    using at::Tensor;
    AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  }

#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
#undef TPU_AUTOCAST_PROMOTE

  m.impl("binary_cross_entropy", TORCH_FN(binary_cross_entropy_refused));

  // PyTorch starts every thread's PrivateUse1 autocast dtype at float16; TPUs
  // compute in bfloat16, so torch.autocast("tpu") without dtype= means
  // bfloat16 as on XLA. The dtype is thread-local in PyTorch: this sets it for
  // the importing thread, the threads that inherit its state (the autograd
  // engine's) and, through torch.tpu.amp.autocast, any thread.
  at::autocast::set_autocast_dtype(c10::DeviceType::PrivateUse1, at::kBFloat16);
}

}  // namespace tpu::aten

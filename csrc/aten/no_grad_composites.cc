// Composite ops run as one lowered op where no gradient is recorded:
// torch.matmul of batched matrices, and cross_entropy over class indices.
//
// Both are CompositeImplicitAutograd: PyTorch decomposes them before any backend
// sees them. matmul becomes expand, reshape and bmm (or mm), and the reshape copies
// any operand that is not contiguous in its batch dimensions. Attention's q, k and v
// are transposed views of one projection, so each product of an attention layer
// first copies its operands (`q @ k.transpose(-2, -1)`, `att @ v`): in Strict Eager
// a program launch and a full read and write of the operand each, which the
// product never needed (a lowering reads a view where it lies). cross_entropy
// becomes log_softmax and nll_loss: two programs, and the log-probabilities
// written out between them.
//
// Registering a kernel for a composite op's backend key takes the op out of
// PyTorch's decomposition for that backend, under autograd too, so both keys are
// ours (AutogradPrivateUse1, and PrivateUse1 for inference_mode, where the
// autograd keys are skipped), and each runs
//   - the op's lowering (csrc/lower: "aten::matmul" in linalg.cc,
//     "aten::cross_entropy_loss" in nn.cc) through the generic kernel, for the
//     forms named below, on plain tpu tensors (no conjugate or negative bit, no
//     fake, Python or functorch wrapper), with no gradient to record (no grad
//     mode or no operand that requires grad, no forward-mode tangent) and no
//     Python dispatch mode active (FlopCounterMode and debug modes see the
//     decomposition's ops, as before);
//   - the decomposition otherwise (at::native::*), at the autograd key as before:
//     autograd differentiates its parts, tracers see the same ops, and errors and
//     promotion rules stay PyTorch's.
// Strict Eager and Defer & Fuse both take the lowerings; torch.compile traces fake
// tensors, which decompose.
#include <ATen/ATen.h>
#include <ATen/ops/cross_entropy_loss_native.h>
#include <ATen/ops/matmul_native.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include "aten/op_kernel.h"
#include "aten/tpu_tensor.h"

namespace tpu::aten {

namespace {

// A tpu tensor with nothing but its backend's keys: not a fake or Python
// subclass, not wrapped by functorch, no lazy conjugate/negative bit. Inference
// tensors lack the autograd keys, so those are added before comparing.
bool plain_tpu(const at::Tensor& t) {
  // (Spelled out, not read from a new tensor: the first call can come under a
  // FakeTensorMode, whose factories make fake tensors.)
  static const c10::DispatchKeySet plain({c10::DispatchKey::PrivateUse1,
                                         c10::DispatchKey::ADInplaceOrView,
                                         c10::DispatchKey::AutogradPrivateUse1,
                                         c10::DispatchKey::AutocastPrivateUse1});
  if (!t.defined() || t.device().type() != kTpu || t.layout() != at::kStrided) return false;
  c10::DispatchKeySet ks = t.key_set()
                               .add(c10::DispatchKey::AutogradPrivateUse1)
                               .add(c10::DispatchKey::ADInplaceOrView);
  return ks == plain;
}

bool lowered_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool records_gradient(const at::Tensor& t) {
  return t.defined() &&
         ((at::GradMode::is_enabled() && t.requires_grad()) || t._fw_grad(/*level=*/0).defined());
}

// At the autograd key: whether the lowering may run (nothing for autograd to
// record, nobody above to see the parts).
bool nothing_to_record(std::initializer_list<const at::Tensor*> ts) {
  if (c10::impl::dispatch_mode_enabled()) return false;
  for (const at::Tensor* t : ts)
    if (records_gradient(*t)) return false;
  return true;
}

// The op's lowering through the generic kernel: `args` is its boxed argument list.
at::Tensor run_lowered(const char* name, torch::jit::Stack args) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  op_kernel(op, &args);
  return args.back().toTensor();
}

// ------------------------------------------------------------------ matmul
// [..., n, k] by [..., k, m] (the same batch sizes) or by [k, m]; both floating,
// of one dtype, on one device.
bool matmul_form(const at::Tensor& a, const at::Tensor& b) {
  if (!plain_tpu(a) || !plain_tpu(b) || a.device() != b.device()) return false;
  if (a.scalar_type() != b.scalar_type() || !lowered_float(a.scalar_type())) return false;
  const int64_t n = a.dim();
  if (n < 3) return false;
  if (b.dim() == 2) return b.size(0) == a.size(-1);
  if (b.dim() != n || b.size(-2) != a.size(-1)) return false;
  for (int64_t d = 0; d < n - 2; ++d)
    if (a.size(d) != b.size(d)) return false;
  return true;
}

at::Tensor matmul_tpu(const at::Tensor& a, const at::Tensor& b) {
  return matmul_form(a, b) ? run_lowered("aten::matmul", {a, b}) : at::native::matmul(a, b);
}

at::Tensor matmul_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (!matmul_form(a, b) || !nothing_to_record({&a, &b})) return at::native::matmul(a, b);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return run_lowered("aten::matmul", {a, b});
}

// ------------------------------------------------------------ cross_entropy
// Scores [N, C] (or [C]) of a floating dtype, class indices [N] (or []) as int64,
// an optional weight [C] of the scores' dtype, no label smoothing, a known
// reduction. (Probability targets, smoothing and more dimensions decompose.)
bool cross_entropy_form(const at::Tensor& self, const at::Tensor& target,
                        const std::optional<at::Tensor>& weight, int64_t reduction,
                        double label_smoothing) {
  if (!plain_tpu(self) || !plain_tpu(target) || target.device() != self.device()) return false;
  if (!lowered_float(self.scalar_type()) || target.scalar_type() != at::kLong) return false;
  if (label_smoothing != 0.0 || reduction < 0 || reduction > 2) return false;
  if (self.dim() == 2) {
    if (target.dim() != 1 || target.size(0) != self.size(0)) return false;
  } else if (self.dim() != 1 || target.dim() != 0) {
    return false;
  }
  if (weight.has_value() && weight->defined()) {
    const at::Tensor& w = *weight;
    if (!plain_tpu(w) || w.device() != self.device() || w.scalar_type() != self.scalar_type() ||
        w.dim() != 1 || w.size(0) != self.size(-1))
      return false;
  }
  return self.size(-1) > 0;
}

torch::jit::Stack cross_entropy_args(const at::Tensor& self, const at::Tensor& target,
                                     const std::optional<at::Tensor>& weight, int64_t reduction,
                                     const c10::SymInt& ignore_index, double label_smoothing) {
  return {self, target, weight, reduction, ignore_index, label_smoothing};
}

at::Tensor cross_entropy_tpu(const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction,
                             c10::SymInt ignore_index, double label_smoothing) {
  if (!cross_entropy_form(self, target, weight, reduction, label_smoothing))
    return at::native::cross_entropy_loss_symint(self, target, weight, reduction, ignore_index,
                                                 label_smoothing);
  return run_lowered("aten::cross_entropy_loss",
                     cross_entropy_args(self, target, weight, reduction, ignore_index,
                                        label_smoothing));
}

at::Tensor cross_entropy_autograd(const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction,
                                  c10::SymInt ignore_index, double label_smoothing) {
  const at::Tensor none;
  const at::Tensor& w = weight.has_value() ? *weight : none;
  if (!cross_entropy_form(self, target, weight, reduction, label_smoothing) ||
      !nothing_to_record({&self, &target, &w}))
    return at::native::cross_entropy_loss_symint(self, target, weight, reduction, ignore_index,
                                                 label_smoothing);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return run_lowered("aten::cross_entropy_loss",
                     cross_entropy_args(self, target, weight, reduction, ignore_index,
                                        label_smoothing));
}

}  // namespace

void register_no_grad_composites(torch::Library& m) {
  m.impl("matmul", TORCH_FN(matmul_tpu));
  m.impl("cross_entropy_loss", TORCH_FN(cross_entropy_tpu));
  static auto* autograd =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradPrivateUse1,
                         __FILE__, __LINE__);
  autograd->impl("matmul", TORCH_FN(matmul_autograd));
  autograd->impl("cross_entropy_loss", TORCH_FN(cross_entropy_autograd));
}

}  // namespace tpu::aten

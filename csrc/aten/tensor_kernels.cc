// Kernels that are not lowerings: allocation, metadata-only views, set_,
// resize_, and reading one element to the host.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zeros_native.h>
#include <torch/library.h>

#include <mutex>
#include <typeinfo>
#include <unordered_map>

#include "aten/kernels.h"
#include "aten/op_kernel.h"
#include "aten/trace.h"
#include "aten/tpu_tensor.h"
#include "engine/execution_mode.h"
#include "engine/executor.h"
#include "engine/runtime.h"
#include "engine/transfer.h"
#include "lower/registry.h"

namespace tpu::aten {

namespace {

c10::DispatchKeySet tpu_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

int device_of(std::optional<c10::Device> d) {
  int idx = d.has_value() && d->has_index() ? d->index() : current_device();
  engine::Runtime::get().check_device(idx);
  return idx;
}

void check_dtype(c10::ScalarType t) { (void)lower::to_elem(t); }

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  c10::ScalarType t = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(t);
  int d = device_of(device);
  c10::DeviceGuard g(c10::Device(kTpu, static_cast<c10::DeviceIndex>(d)));
  return at::detail::empty_generic(size, tpu_allocator(), tpu_keys(), t, memory_format);
}

// torch.zeros. In Strict Eager the new storage gets an uploaded zero buffer at
// once instead of running a zero_ program on it (one launch less; autograd makes
// such zeros for every unused output's gradient, e.g. the logits of a compiled
// forward whose loss alone is backpropagated). Defer & Fuse records zero_ as usual,
// so the zeros stay inside the fused program.
at::Tensor zeros(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                 std::optional<bool> pin_memory) {
  if (engine::current_mode() != engine::Mode::kStrictEager)
    return at::native::zeros_symint(c10::fromIntArrayRefSlow(size), dtype, layout, device, pin_memory);
  at::Tensor t = empty_memory_format(size, dtype, layout, device, pin_memory, std::nullopt);
  if (t.numel() > 0) {
    c10::DeviceGuard g(t.device());
    materialize_zeros(slot_of(t), t.scalar_type());
  }
  return t;
}

// zero_ of a storage nothing has written yet (torch.zeros_like, torch.zeros in
// Defer & Fuse: empty, then zero_): the storage gets an uploaded zero buffer, as
// any first read of uninitialised memory does, and zero_ has nothing left to do.
// Recording it anyway made the zeros part of the fused program: AdamW creates
// its state that way inside the first training step, so that step's program
// differed from every later step's (state read as an input) and a training loop
// compiled its whole step twice. Without the node the first step's program is
// the steady one. A graph being captured for torch.compile records the zero_ as
// before (its replays must make fresh zeros, not reuse one captured buffer).
void zero_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor& self = stack->back().toTensor();
  if (self.numel() > 0 && !this_thread_trace()->unbounded) {
    engine::Slot* slot = slot_of(self);
    if (!slot->pending() && !slot->raw_has_buffer()) {
      c10::DeviceGuard g(self.device());
      materialize_zeros(slot, self.scalar_type());
      return;  // the boxed result of zero_ is self, already on the stack
    }
  }
  op_kernel(op, stack);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  c10::ScalarType t = dtype.value_or(c10::get_default_dtype_as_scalartype());
  check_dtype(t);
  int d = device_of(device);
  c10::DeviceGuard g(c10::Device(kTpu, static_cast<c10::DeviceIndex>(d)));
  return at::detail::empty_strided_generic(size, stride, tpu_allocator(), tpu_keys(), t);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  int64_t offset = impl->storage_offset();
  std::vector<int64_t> strides;
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Contiguous &&
      *memory_format != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  int64_t need = static_cast<int64_t>(at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.dtype().itemsize(), offset));
  if (self.numel() > 0) resize_storage(self, need);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t offset,
                        c10::IntArrayRef size, c10::IntArrayRef stride) {
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  int64_t need = static_cast<int64_t>(at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.dtype().itemsize(), offset));
  if (self.numel() > 0) resize_storage(self, need);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& src) {
  return set_storage(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage st(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), true);
  return set_storage(self, std::move(st), 0, {0}, {});
}

// Tensor.record_stream (FSDP, DDP): there is no caching allocator to hold the
// memory back from; PJRT keeps a buffer alive while launched work reads it.
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == kTpu, "record_stream: expected a tpu stream, got a ",
              s.device_type(), " stream");
}

// Whether `from` may replace `self`'s contents through `self.data = from`. PyTorch
// asks this in Module._apply (module.to("tpu")): when true it swaps `.data` in
// place, so each Parameter stays the same object (tied weights stay tied,
// optimizers built beforehand keep their parameters) as on CUDA. A plain CPU
// tensor and a plain tpu tensor are the same TensorImpl type, so they are
// compatible; anything else (subclasses, functional or fake tensors, other
// layouts) keeps PyTorch's own rule.
bool plain_dense(const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  c10::DeviceType d = t.device().type();
  return typeid(*impl) == typeid(c10::TensorImpl) && t.layout() == c10::kStrided &&
         (d == c10::kCPU || d == kTpu) && !t.key_set().has(c10::DispatchKey::Python);
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  return plain_dense(self) && plain_dense(from);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor cpu = to_host(self);
  return cpu.item();
}

}  // namespace

void register_tensor_kernels(torch::Library& m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("zeros", TORCH_FN(zeros));
  m.impl("zero_", torch::CppFunction::makeFromBoxedFunction<&zero_kernel>());
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("alias", TORCH_FN(at::native::alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace tpu::aten

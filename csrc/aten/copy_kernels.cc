// Copies between devices: cpu -> tpu, tpu -> cpu, tpu -> tpu.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "aten/deferred_buckets.h"
#include "aten/kernels.h"
#include "aten/host_copy.h"
#include "aten/deferred_graph.h"
#include "aten/op_kernel.h"
#include "aten/tpu_tensor.h"
#include "engine/host_alias.h"
#include "engine/transfer.h"
#include "lower/registry.h"

namespace tpu::aten {

namespace {

bool is_tpu(const at::Tensor& t) { return t.device().type() == kTpu; }

// dst <- src on the device, through the lowering of aten::copy.
void device_copy(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{dst, src, non_blocking};
  op_kernel(op, &stack);
}

// PyTorch's lazy conjugate and negative views (is_conj / is_neg) share their
// base's buffer: the bit is on the tensor, not in the data. ATen's Conjugate
// and Negative fallbacks pass copy_ through and resolve_conj / resolve_neg are
// copies, so copy_ is where the bits turn into values: the destination's
// buffer must hold conj/neg (per dst's bits) of src's logical values.
bool has_lazy_bits(const at::Tensor& t) { return t.is_conj() || t.is_neg(); }

// The values dst's buffer must hold for it to read as `logical` (no bits).
at::Tensor physical_for(const at::Tensor& dst, at::Tensor logical) {
  if (dst.is_conj()) logical = at::conj_physical(logical);
  if (dst.is_neg()) logical = at::neg(logical);
  return logical;
}

void host_to_device(const at::Tensor& dst, const at::Tensor& src) {
  at::Tensor values = src;
  if (has_lazy_bits(src) || has_lazy_bits(dst))
    values = physical_for(dst, src.resolve_conj().resolve_neg());
  // Convert and lay out on the host, then one transfer.
  at::Tensor host = values.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  engine::Slot* slot = slot_of(dst);
  hlo::ElemType elem = lower::to_elem(dst.scalar_type());
  int64_t length = slot->nbytes() / static_cast<int64_t>(engine::elem_size(elem));
  if (engine::covers_whole(layout_of(dst), length)) {
    auto buf = engine::upload(host.const_data_ptr(), elem, {length}, slot->device());
    note_upload_shape(buf, dst.sizes());
    slot->set_buffer(std::move(buf), elem);
    return;
  }
  int64_t n = host.numel();
  at::Tensor staged = wrap_buffer(engine::upload(host.const_data_ptr(), elem, {n}, slot->device()),
                                  dst.scalar_type(), dst.sizes(), slot->device());
  device_copy(dst, staged, false);
}

// A view that is only part of its storage (x[:n] of a bucket's padded result, a
// row) read on the device is a slice program for the view's shape: one program
// per size when sizes vary. When the view is a large part of the storage (or the
// storage is small), the whole buffer comes to the host and the view is taken
// there: a few times the bytes at most, and no program. False: the caller reads
// it on the device.
bool read_view_on_host(const at::Tensor& self, const at::Tensor& out) {
  constexpr int64_t kSmallStorage = int64_t{1} << 20;  // bytes
  if (has_lazy_bits(self) || out.numel() == 0) return false;
  FlushReason reason("host read");
  engine::Slot* slot = slot_of(self);
  hlo::ElemType elem = lower::to_elem(self.scalar_type());
  if (!slot->has_buffer() || slot->elem() != elem) return false;
  int64_t length = slot->length();
  if (engine::covers_whole(layout_of(self), length)) return false;  // read directly anyway
  int64_t bytes = length * static_cast<int64_t>(engine::elem_size(elem));
  if (bytes > kSmallStorage && self.numel() * 4 < length) return false;
  std::shared_ptr<pjrt::Buffer> buf = slot->buffer();
  raise_device_check_failures(-1);  // as dense_buffer_for_host_read does
  at::Tensor whole = at::empty({length}, out.options());
  engine::download(*buf, whole.data_ptr(), whole.nbytes());
  out.copy_(whole.as_strided(self.sizes(), self.strides(), self.storage_offset()));
  return true;
}

}  // namespace

at::Tensor to_host(const at::Tensor& self) {
  at::Tensor out = at::empty(self.sizes(), self.options().device(c10::kCPU));
  to_host_into(self, out);
  return out;
}

void to_host_into(const at::Tensor& self, const at::Tensor& out) {
  TORCH_CHECK(out.device().is_cpu() && out.is_contiguous() &&
                  out.scalar_type() == self.scalar_type() && out.numel() == self.numel(),
              "to_host_into: needs a contiguous CPU tensor of ", self.scalar_type(), " with ",
              self.numel(), " elements");
  if (read_view_on_host(self, out)) return;
  std::shared_ptr<pjrt::Buffer> buf = dense_buffer_for_host_read(self);
  if (out.numel() == 0) return;
  engine::download(*buf, out.data_ptr(), out.nbytes());
}

std::shared_ptr<pjrt::Buffer> dense_buffer_for_host_read(const at::Tensor& self) {
  FlushReason reason("host read");
  at::Tensor src = self;
  engine::Slot* slot = slot_of(src);
  hlo::ElemType elem = lower::to_elem(src.scalar_type());
  bool direct = slot->has_buffer() && slot->elem() == elem &&
                engine::covers_whole(layout_of(src), slot->length());
  if (!direct) {
    src = at::empty(self.sizes(), self.options());
    device_copy(src, self, false);
    slot = slot_of(src);
  }
  std::shared_ptr<pjrt::Buffer> buf = slot->buffer();  // runs pending work
  // The host waits here anyway: device-side checks of everything launched so
  // far report first (a value computed past a bad index is not returned).
  raise_device_check_failures(-1);
  return buf;
}

void adopt_host_values(const at::Tensor& dst, const at::Tensor& host) {
  TORCH_CHECK(is_tpu(dst) && host.device().is_cpu(), "adopt_host_values: tpu <- cpu only");
  if (dst.numel() == 0) return;
  engine::Slot* slot = slot_of(dst);
  hlo::ElemType elem = lower::to_elem(dst.scalar_type());
  int64_t length = slot->nbytes() / static_cast<int64_t>(engine::elem_size(elem));
  bool whole = host.scalar_type() == dst.scalar_type() && host.is_contiguous() &&
               host.sizes() == dst.sizes() && !has_lazy_bits(dst) && !has_lazy_bits(host) &&
               host.numel() == length && engine::covers_whole(layout_of(dst), length);
  if (!whole) {
    at::Tensor d = dst;
    d.copy_(host);
    return;
  }
  // The device buffer may alias the host memory: the storage (and so the
  // memory) lives until the buffer is done with it.
  auto keep = std::make_shared<c10::Storage>(host.storage());
  slot->set_buffer(
      engine::upload_aliasing(host.const_data_ptr(), elem, {length}, slot->device(), std::move(keep)),
      elem);
}

at::Tensor resolve_lazy_bits(const at::Tensor& t) {
  if (!has_lazy_bits(t)) return t;
  // The buffer's values into a plain tensor, then the bits applied as values
  // (ops on a tensor without bits, so this does not come back here).
  at::Tensor plain = at::empty(t.sizes(), t.options());
  device_copy(plain, t, false);
  if (t.is_conj()) plain = at::conj_physical(plain);
  if (t.is_neg()) plain = at::neg(plain);
  return plain;
}

namespace {

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() == 0) return self;
  if (is_tpu(self) && is_tpu(src)) {
    if (self.device() != src.device()) {
      // PJRT does not move buffers between devices: stage through the host.
      host_to_device(self, to_host(src));
    } else if (has_lazy_bits(self) || has_lazy_bits(src)) {
      device_copy(self, physical_for(self, resolve_lazy_bits(src)), non_blocking);
    } else {
      device_copy(self, src, non_blocking);
    }
  } else if (is_tpu(self)) {
    TORCH_CHECK(src.device().is_cpu(), "copy from ", src.device(), " to tpu is not supported");
    host_to_device(self, src);
  } else {
    TORCH_CHECK(self.device().is_cpu(), "copy from tpu to ", self.device(), " is not supported");
    // to_host reads the buffer; the CPU copy_ then resolves both sides' bits.
    at::Tensor host = to_host(src);
    if (src.is_conj()) host = host.conj();
    if (src.is_neg()) host = host._neg_view();
    self.copy_(host);
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor d = dst;
  copy_(d, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

}  // namespace

void register_copy_kernels(torch::Library& m) {
  m.impl("copy_", TORCH_FN(copy_));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
}

}  // namespace tpu::aten

#include "dist/in_place_reduce.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "aten/op_kernel.h"
#include "aten/tpu_tensor.h"
#include "core/settings.h"
#include "dist/phase_probe.h"
#include "engine/host_alias.h"
#include "engine/view_io.h"
#include "lower/registry.h"

namespace tpu::dist {

namespace {

bool enabled() {
  static const bool on = settings::flag("TORCH_TPU_DIST_IN_PLACE");
  return on;
}

std::atomic<int64_t> g_in_place{0};
std::atomic<int64_t> g_declined{0};

std::optional<InPlaceHost> find_in_place_host(const at::Tensor& t) {
  if (!enabled() || t.numel() == 0 || t.is_conj() || t.is_neg() || !t.is_contiguous())
    return std::nullopt;
  PhaseProbe probe("allreduce 2a in-place view");
  const std::shared_ptr<engine::Slot>& slot = aten::slot_ref(t);
  hlo::ElemType elem = lower::to_elem(t.scalar_type());
  // has_buffer() runs a pending value's trace (another thread's, say).
  if (!slot->has_buffer() || slot->elem() != elem ||
      !engine::covers_whole(aten::layout_of(t), slot->length()))
    return std::nullopt;
  std::shared_ptr<pjrt::Buffer> buf = slot->buffer();
  // Device-side checks of what produced it report first, as for a host read.
  aten::raise_device_check_failures(-1);
  // The Slot's reference and ours: anyone else (another Slot, a trace's
  // parameter, an earlier collective's Gloo work still alive) would see the write.
  if (buf.use_count() != 2) return std::nullopt;
  pjrt::HostView view = engine::writable_host_view(*buf, slot->device());
  if (view.data == nullptr) return std::nullopt;
  // Waiting let other threads run: the buffer must still be the Slot's, and only its.
  // (Compared as raw pointers: a copy of the Slot's shared_ptr would count.)
  if (slot->raw_buffer().get() != buf.get()) return std::nullopt;
  if (buf.use_count() != 2) return std::nullopt;
  // PJRT hands out a const pointer because its buffers are immutable; the
  // checks above are what make this write invisible to anyone else.
  void* data = const_cast<void*>(view.data);
  // The host tensor does not own the memory: `hold` keeps it, and the caller
  // keeps `hold` until Gloo is done with it (Gloo's own Work may keep the
  // tensor longer, never touching it again; holding the buffer through it
  // would make the next collective on this tensor find it shared, on one
  // rank and not another depending on thread timing).
  at::Tensor host = at::from_blob(data, t.sizes(), t.options().device(c10::kCPU));
  // The external reference is released on a live PJRT buffer, whichever of
  // the two holders goes last.
  void* raw = view.hold.get();
  std::shared_ptr<void> hold(raw, [ref = std::move(view.hold), buf](void*) mutable {
    ref.reset();
    buf.reset();
  });
  return InPlaceHost{std::move(host), std::move(hold)};
}

}  // namespace

std::optional<InPlaceHost> in_place_host(const at::Tensor& t) {
  if (t.device().type() != aten::kTpu) return std::nullopt;
  std::optional<InPlaceHost> out = find_in_place_host(t);
  ++(out ? g_in_place : g_declined);
  return out;
}

InPlaceStats in_place_stats() { return InPlaceStats{g_in_place.load(), g_declined.load()}; }

}  // namespace tpu::dist

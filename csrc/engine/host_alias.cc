#include "engine/host_alias.h"

#include <cstdlib>
#include <string>

#include "core/settings.h"
#include "engine/async_errors.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/slot.h"
#include "engine/transfer.h"
#include "pjrt/host_transfer.h"

namespace tpu::engine {

std::shared_ptr<pjrt::Buffer> upload_aliasing(const void* data, hlo::ElemType elem,
                                              const std::vector<int64_t>& dims, int device,
                                              std::shared_ptr<void> keep) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  metrics().bytes_to_device += static_cast<uint64_t>(n) * elem_size(elem);
  auto buf = pjrt::buffer_from_host_zero_copy(
      Runtime::get().client(), data, to_pjrt(elem), dims, device,
      [keep = std::move(keep)]() mutable { keep.reset(); });
  track_ready(device, *buf);
  return buf;
}

std::unique_ptr<pjrt::Event> download_part(const pjrt::Buffer& buf, void* dst, int64_t offset,
                                           int64_t size) {
  auto ev = pjrt::copy_raw_to_host(Runtime::get().client(), buf, dst, offset, size);
  if (ev) metrics().bytes_to_host += static_cast<uint64_t>(size);
  return ev;
}

namespace {

bool host_views_enabled() {
  static const bool enabled = settings::flag("TORCH_TPU_DIST_HOST_VIEW");
  return enabled;
}

void await_value(const pjrt::Buffer& buf) {
  try {
    buf.await_ready();
  } catch (const pjrt::Error& e) {
    raise_read_failure(buf, e);  // names the op whose program failed to produce it
  }
}

}  // namespace

pjrt::HostView writable_host_view(const pjrt::Buffer& buf, int device) {
  if (!host_views_enabled()) return {};
  await_value(buf);
  // Readers launched after the producer: their completion events are what
  // the executor tracks (a failure among them is theirs, reported at the
  // next sync point as usual, not here).
  for (const auto& ev : unfinished_work(device)) {
    try {
      ev->await();
    } catch (const pjrt::Error&) {
    }
  }
  return pjrt::host_view(Runtime::get().client(), buf);
}

pjrt::HostView readable_host_view(const pjrt::Buffer& buf, size_t nbytes) {
  if (!host_views_enabled()) return {};
  await_value(buf);
  pjrt::HostView view = pjrt::host_view(Runtime::get().client(), buf);
  if (view.data != nullptr) metrics().bytes_to_host += nbytes;
  return view;
}

}  // namespace tpu::engine

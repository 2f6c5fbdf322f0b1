// Device guard and PrivateUse1 hooks: current device, device count, streams and
// events (stream_event.h), generators, storage resize.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "aten/generator.h"
#include "aten/kernels.h"
#include "aten/pinned_memory.h"
#include "aten/stream_event.h"
#include "aten/tpu_tensor.h"
#include "aten/op_kernel.h"
#include "engine/executor.h"
#include "engine/runtime.h"

namespace tpu::aten {

namespace {

int safe_device_count() noexcept {
  try {
    return engine::Runtime::get().device_count();
  } catch (...) {
    return 0;
  }
}

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kTpu, static_cast<c10::DeviceIndex>(current_device()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "expected a tpu device, got ", d);
    if (d.index() < 0) return;
    int n = safe_device_count();
    TORCH_CHECK(d.index() < n, "tpu device index ", int(d.index()), " is out of range: ", n,
                " tpu device(s) available");
    set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) set_current_device(d.index());
  }
  // Streams and events: stream_event.h says how they map onto PJRT.
  c10::Stream getStream(c10::Device d) const override { return streams::current(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return streams::default_stream(d.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return streams::from_pool(d.index(), high_priority);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return streams::fresh(d.index(), priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return streams::exchange(s); }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(safe_device_count());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    streams::synchronize_device(device_index);
    raise_device_check_failures(device_index);
  }
  void synchronizeStream(const c10::Stream& s) const override {
    streams::synchronize(s);
    raise_device_check_failures(s.device_index());
  }
  bool queryStream(const c10::Stream& s) const override { return streams::query(s); }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device,
              const c10::EventFlag flag) const override {
    streams::record(event, s, device, flag);
  }
  void block(void* event, const c10::Stream& s) const override { streams::block(event, s); }
  bool queryEvent(void* event) const override { return streams::query_event(event); }
  void synchronizeEvent(void* event) const override {
    streams::synchronize_event(event);
    raise_device_check_failures(-1);  // the host waited: device-side checks report here
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    return streams::elapsed_ms(start, end);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    streams::destroy_event(event);
  }
  // PJRT keeps a buffer alive while a launched program uses it: nothing to note.
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return safe_device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return default_generator(device_index < 0 ? current_device() : device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return at::make_generator<TpuGenerator>(device_index < 0 ? current_device() : device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    return c10::Device(kTpu, static_cast<c10::DeviceIndex>(current_device()));
  }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return engine::Runtime::get().initialized();
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(safe_device_count());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = current_device();
    set_current_device(device);
    return static_cast<c10::DeviceIndex>(old);
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  // Tensor.pin_memory() / is_pinned() (pinned_memory.h).
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  // UntypedStorage.resize_ (FSDP2 frees and re-allocates parameters this way).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), static_cast<int64_t>(newsize));
  }
};

}  // namespace

void register_hooks() {
  static TpuHooks* hooks = new TpuHooks();
  static bool done = false;
  if (done) return;
  done = true;
  at::RegisterPrivateUse1HooksInterface(hooks);
}

}  // namespace tpu::aten

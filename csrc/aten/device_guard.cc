// Device guard and PrivateUse1 hooks: current device, device count, generators.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "aten/generator.h"
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
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(safe_device_count());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    engine::synchronize(device_index);
    raise_device_check_failures(device_index);
  }
  void synchronizeStream(const c10::Stream& s) const override {
    engine::synchronize(s.device_index());
    raise_device_check_failures(s.device_index());
  }
  bool queryStream(const c10::Stream&) const override { return true; }
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
  // non_blocking tpu -> cpu copies ask for pinned host memory; PJRT transfers
  // from any host memory, so ordinary CPU memory serves.
  c10::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    TORCH_CHECK(false, "resizing a tpu storage directly is not supported; use Tensor.resize_");
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

// The tpu allocator: a storage is a Slot; its address is synthetic (DESIGN.md).
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <optional>
#include <vector>

#include "aten/deferred_graph.h"
#include "aten/tpu_tensor.h"
#include "engine/host_heap.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/transfer.h"
#include "lower/registry.h"

namespace tpu::aten {

namespace {

thread_local int tls_device = 0;

// The DataPtr context: the storage's reference to its Slot. The pending graph
// may hold more references; the storage dying marks the Slot dead so that the
// graph does not output a value nobody can read.
struct SlotHolder {
  std::shared_ptr<engine::Slot> slot;
};

void delete_slot(void* ctx) {
  auto* h = static_cast<SlotHolder*>(ctx);
  h->slot->mark_dead();
  delete h;
}

// A c10::DeviceAllocator, which is what torch.accelerator's memory functions
// (memory_allocated, memory_stats, get_memory_info, empty_cache ...) look up for
// the device type. Our own accounting (engine::Runtime) answers them: a storage
// counts its bytes while it holds a device buffer.
class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    // Every path that makes device memory (factories, op outputs, fused graphs'
    // results, host->device copies) makes a storage here first.
    try {
      if (nbytes > 0) engine::Runtime::get().check_fits(device, static_cast<int64_t>(nbytes));
    } catch (const pjrt::Error& e) {
      if (!e.is_out_of_memory()) throw;
      TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    }
    uint64_t addr = engine::reserve_address(static_cast<int64_t>(nbytes));
    auto* slot = new SlotHolder{std::make_shared<engine::Slot>(device, static_cast<int64_t>(nbytes), addr)};
    return {reinterpret_cast<void*>(addr), slot, &delete_slot,
            c10::Device(kTpu, static_cast<c10::DeviceIndex>(device))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host");
  }

  // The accounting works before the PJRT client starts (everything is 0 then).
  bool initialized() override { return true; }
  // A buffer goes back to PJRT when its storage dies. On the CPU plugin freed
  // memory stays in the process heap for reuse (engine/host_heap.h): this returns it.
  void emptyCache(c10::MempoolId_t) override { engine::release_host_memory(); }
  // PJRT keeps a buffer alive while launched work reads it.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    settle_for_memory_query();
    engine::Runtime::MemoryCounters m = engine::Runtime::get().memory_counters(device);
    c10::CachingDeviceAllocator::DeviceStats s;
    auto fill = [](c10::CachingDeviceAllocator::StatArray& a, int64_t cur, int64_t peak,
                   int64_t allocated, int64_t freed) {
      // One pool: the aggregate and the large pool say the same.
      for (size_t k : {size_t(0), size_t(2)}) {
        a[k].current = cur;
        a[k].peak = peak;
        a[k].allocated = allocated;
        a[k].freed = freed;
      }
    };
    for (auto* a : {&s.allocation, &s.segment, &s.active})
      fill(*a, m.count, m.peak_count, m.allocs_total, m.frees_total);
    for (auto* a : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes})
      fill(*a, m.live, m.peak, m.allocated_total, m.freed_total);
    s.num_device_alloc = m.allocs_total;
    s.num_device_free = m.frees_total;
    return s;
  }
  // Resets settle first too: work issued before the reset counts before it.
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    settle_for_memory_query();
    engine::Runtime::get().reset_accumulated(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    settle_for_memory_query();
    engine::Runtime::get().reset_peak(device);
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    settle_for_memory_query();
    auto [free, total] = engine::Runtime::get().memory_info(device < 0 ? current_device() : device);
    return {static_cast<size_t>(free), static_cast<size_t>(total)};
  }
};

TpuAllocator g_allocator;
// torch.UntypedStorage(n, device="tpu") and Storage.tpu() look the allocator up by
// device type; without this they dereference a null allocator.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::Allocator* tpu_allocator() { return &g_allocator; }

int current_device() { return tls_device; }
void set_current_device(int d) { tls_device = d; }

engine::Slot* slot_of(const at::Tensor& t) {
  return slot_ref(t).get();
}

const std::shared_ptr<engine::Slot>& slot_ref(const at::Tensor& t) {
  return slot_of_storage(*t.storage().unsafeGetStorageImpl());
}

const std::shared_ptr<engine::Slot>& slot_of_storage(const c10::StorageImpl& st) {
  auto* h = static_cast<SlotHolder*>(st.data_ptr().get_context());
  TORCH_CHECK(h != nullptr && st.data_ptr().get_deleter() == &delete_slot,
              "tpu tensor without a device storage");
  return h->slot;
}

engine::ViewLayout layout_of(const at::Tensor& t) {
  engine::ViewLayout v;
  v.sizes = t.sizes().vec();
  v.strides = t.strides().vec();
  v.offset = t.storage_offset();
  return v;
}

at::Tensor empty_tpu(c10::IntArrayRef sizes, c10::ScalarType dtype, int device) {
  c10::DeviceGuard g(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
  return at::detail::empty_generic(sizes, tpu_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype, c10::MemoryFormat::Contiguous);
}

at::Tensor empty_result(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        int device) {
  // Usually the thread's device already: then no guard, whose virtual calls
  // (twice per result) cost more than the rest of making the tensor.
  std::optional<c10::DeviceGuard> g;
  if (device != tls_device) g.emplace(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
  if (strides.empty())
    return at::detail::empty_generic(sizes, tpu_allocator(),
                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                     c10::MemoryFormat::Contiguous);
  return at::detail::empty_strided_generic(sizes, strides, tpu_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

at::Tensor wrap_buffer(std::shared_ptr<pjrt::Buffer> buf, c10::ScalarType dtype,
                       c10::IntArrayRef sizes, int device) {
  at::Tensor t = empty_tpu(sizes, dtype, device);
  slot_of(t)->set_buffer(std::move(buf), lower::to_elem(dtype));
  return t;
}

void materialize_zeros(engine::Slot* slot, c10::ScalarType dtype) {
  if (slot->has_buffer()) return;
  hlo::ElemType elem = lower::to_elem(dtype);
  int64_t n = slot->nbytes() / static_cast<int64_t>(engine::elem_size(elem));
  slot->set_buffer(engine::zeros(elem, n, slot->device()), elem);
}

}  // namespace tpu::aten

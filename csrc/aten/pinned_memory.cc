// Pinned host memory for tpu: Tensor.pin_memory() / is_pinned() and
// DataLoader(pin_memory=True) as on CUDA.
//
// PyTorch allocates pinned memory through the accelerator hooks'
// getPinnedMemoryAllocator() and asks isPinnedPtr() whether a CPU tensor is
// pinned. PJRT copies host data into a device buffer before its host-to-device
// call returns (kImmutableOnlyDuringCall), so no transfer ever reads host
// memory after the copy call: a `non_blocking=True` copy from pinned memory is
// as safe as CUDA's after its event, and pinned memory needs no page locking.
// What it needs is identity: the allocator remembers the ranges it handed out,
// so that is_pinned() is true for exactly those tensors (and views into them).
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <map>
#include <mutex>

#include "aten/pinned_memory.h"
#include "aten/tpu_tensor.h"

namespace tpu::aten {

namespace {

struct PinnedRanges {
  std::mutex mu;
  std::map<uintptr_t, size_t> live;  // start -> bytes
  at::HostStats stats;
};
PinnedRanges& ranges() {
  static auto* r = new PinnedRanges();
  return *r;
}

void free_pinned(void* p) {
  PinnedRanges& r = ranges();
  {
    std::lock_guard<std::mutex> g(r.mu);
    auto it = r.live.find(reinterpret_cast<uintptr_t>(p));
    if (it != r.live.end()) {
      r.stats.allocated_bytes.decrease(static_cast<int64_t>(it->second));
      r.stats.allocations.decrease(1);
      r.stats.num_host_free++;
      r.live.erase(it);
    }
  }
  c10::free_cpu(p);
}

class PinnedHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    // A zero-byte request still gets a distinct address, so that it counts as pinned.
    const size_t n = nbytes == 0 ? 1 : nbytes;
    void* p = c10::alloc_cpu(n);
    PinnedRanges& r = ranges();
    {
      std::lock_guard<std::mutex> g(r.mu);
      r.live[reinterpret_cast<uintptr_t>(p)] = n;
      r.stats.allocated_bytes.increase(static_cast<int64_t>(n));
      r.stats.allocations.increase(1);
      r.stats.num_host_alloc++;
    }
    return {p, p, &free_pinned, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // No caching and no asynchronous reads of host memory (see the top of this file).
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> g(ranges().mu);
    return ranges().stats;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> g(ranges().mu);
    ranges().stats.allocated_bytes.reset_accumulated();
    ranges().stats.allocations.reset_accumulated();
    ranges().stats.num_host_alloc = ranges().stats.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> g(ranges().mu);
    ranges().stats.allocated_bytes.reset_peak();
    ranges().stats.allocations.reset_peak();
  }
};

PinnedHostAllocator g_pinned;
// torch.accelerator.empty_host_cache() and host memory stats look it up by device type.
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned)

}  // namespace

c10::Allocator* pinned_allocator() { return &g_pinned; }

bool is_pinned_ptr(const void* data) {
  auto a = reinterpret_cast<uintptr_t>(data);
  PinnedRanges& r = ranges();
  std::lock_guard<std::mutex> g(r.mu);
  auto it = r.live.upper_bound(a);
  if (it == r.live.begin()) return false;
  --it;
  return a < it->first + it->second;
}

}  // namespace tpu::aten

// The process-wide PJRT runtime: which plugin, the client, its devices.
//
// Python decides the plugin (TORCH_TPU_PLATFORM, found through packaging) and
// calls configure(); the plugin is loaded on first use, so `import torch_tpu`
// stays cheap. After fork() the child may not touch the parent's client (PJRT
// clients own threads), exactly like CUDA: use raises a clear error.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pjrt/pjrt.h"

namespace tpu::engine {

class Runtime {
 public:
  static Runtime& get();

  // `platform`: the name the user asked for ("cpu", "tpu", "cuda" or a path);
  // `plugin_path`: the shared library; `cpu_device_count` for the CPU plugin;
  // `plugin_logs`: let the plugin's start-up logging reach stderr;
  // `keep_cpu_heap`: on the CPU plugin, keep freed host memory for reuse
  // (engine/host_heap.h) from the client's start.
  void configure(const std::string& platform, const std::string& plugin_path,
                 int64_t cpu_device_count, bool plugin_logs = false,
                 bool keep_cpu_heap = true);
  bool configured() const;
  bool initialized() const;

  // Loads the plugin and creates the client on first call; throws
  // pjrt::Error with a message saying what to do when that fails.
  pjrt::Client& client();
  int device_count();
  void check_device(int index);  // throws std::out_of_range-like c10-free error
  std::string platform() const { return platform_; }
  std::string plugin_path() const { return plugin_path_; }

  // Per-device memory accounting (PJRT CPU has no memory stats of its own).
  void note_alloc(int device, int64_t bytes);
  void note_free(int device, int64_t bytes);
  int64_t allocated(int device) const;
  int64_t peak(int device) const;
  int64_t alloc_count(int device) const;
  void reset_peak(int device);
  // Everything the DeviceAllocator reports: live and peak bytes and buffers, and
  // the totals since the last reset_accumulated().
  struct MemoryCounters {
    int64_t live = 0, peak = 0, count = 0, peak_count = 0;
    int64_t allocated_total = 0, freed_total = 0, allocs_total = 0, frees_total = 0;
  };
  MemoryCounters memory_counters(int device) const;
  void reset_accumulated(int device);

  // The bytes this process may hold on `device`: the limit the PJRT plugin's
  // allocator reports (TPU, GPU), else (the CPU plugin, which reports none) the
  // machine's physical RAM, which is what its buffers live in. The one place
  // that decides the capacity: a configured byte limit belongs here too.
  int64_t memory_capacity(int device);
  // (free, total) bytes, as cudaMemGetInfo: total = memory_capacity(); in use is
  // the plugin's own figure where it reports one, else our accounting.
  std::pair<int64_t, int64_t> memory_info(int device);

  // A byte limit imposed on every device (TORCH_TPU_MEMORY_LIMIT; 0: none) and a
  // per-device fraction (torch.tpu.set_per_process_memory_fraction), on any
  // platform: memory_capacity() honours both, so a CPU host can act as a chip
  // of a given size.
  void set_memory_limit(int64_t bytes);
  void set_memory_fraction(int device, double fraction);
  // Throws pjrt::Error(RESOURCE_EXHAUSTED) naming the request, the bytes in use
  // and the capacity when `bytes` more would not fit on `device`.
  void check_fits(int device, int64_t bytes);

  void mark_forked() { forked_ = true; }

 private:
  Runtime();
  mutable std::mutex mu_;
  std::string platform_, plugin_path_;
  int64_t cpu_device_count_ = 1;
  bool plugin_logs_ = false;
  bool keep_cpu_heap_ = true;
  std::shared_ptr<pjrt::Client> client_;
  std::string init_error_;
  bool forked_ = false;
  using Mem = MemoryCounters;
  int64_t limit_ = 0;
  std::vector<double> fraction_ = std::vector<double>(64, 1.0);
  std::vector<int64_t> capacity_ = std::vector<int64_t>(64, -1);  // memoised memory_capacity
  std::vector<Mem> mem_;
  Mem& mem(int device);
};

}  // namespace tpu::engine

#include "engine/runtime.h"
#include "engine/host_gemm.h"

#include <pthread.h>

#include <cstdio>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <stdexcept>

#include "core/settings.h"
#include "engine/compile_pool.h"
#include "engine/host_heap.h"
#include "pjrt/stderr_capture.h"

namespace tpu::engine {

namespace {
void on_fork_child() { Runtime::get().mark_forked(); }

// The CPU plugin sizes its worker and intra-op (Eigen) pools from XLA's NPROC when set,
// else from the CPUs of the machine, when the client starts. We set it to the CPUs the
// process may use (its affinity mask, which XLA does not read): one thread per core,
// the best on a machine whose cores are free. A 2-core machine, GPT step, one
// interleaved run each (docs/performance.md): quiet, 2 threads against 4 made Defer &
// Fuse training 1.26x and inference 1.34x faster (extra threads wait for a core at
// every parallel loop); with two busy processes beside it, 4 threads were 1.18x faster
// (a pool thread that loses its core holds up every loop waiting on its share), and at
// load 16-27 ~2x. Shared machines set TORCH_TPU_CPU_THREADS (or NPROC, which wins).
// NPROC is set only around the client's start, so that child processes do not inherit it.
class CpuThreads {
 public:
  CpuThreads() {
    if (std::getenv("NPROC")) return;  // the user's choice wins
    int64_t n = tpu::settings::raw("TORCH_TPU_CPU_THREADS")
                    ? tpu::settings::integer("TORCH_TPU_CPU_THREADS")
                    : cpus_allowed();
    setenv("NPROC", std::to_string(std::max<int64_t>(1, n)).c_str(), 1);
    set_ = true;
  }
  ~CpuThreads() {
    if (set_) unsetenv("NPROC");
  }

 private:
  bool set_ = false;
};
}  // namespace

Runtime& Runtime::get() {
  static Runtime* r = new Runtime();  // leaked on purpose: PJRT clients must not be
                                      // torn down by static destructors at exit
  return *r;
}

Runtime::Runtime() : mem_(64) { pthread_atfork(nullptr, nullptr, on_fork_child); }

void Runtime::configure(const std::string& platform, const std::string& plugin_path,
                        int64_t cpu_device_count, bool plugin_logs, bool keep_cpu_heap) {
  std::lock_guard<std::mutex> g(mu_);
  if (client_) {
    if (plugin_path != plugin_path_)
      throw std::runtime_error("torch_tpu: the PJRT runtime is already initialised with '" +
                               plugin_path_ + "'; the platform cannot change in a process");
    return;
  }
  platform_ = platform;
  plugin_path_ = plugin_path;
  cpu_device_count_ = cpu_device_count;
  plugin_logs_ = plugin_logs;
  keep_cpu_heap_ = keep_cpu_heap;
  init_error_.clear();
}

bool Runtime::configured() const {
  std::lock_guard<std::mutex> g(mu_);
  return !plugin_path_.empty();
}

bool Runtime::initialized() const {
  std::lock_guard<std::mutex> g(mu_);
  return client_ != nullptr;
}

pjrt::Client& Runtime::client() {
  if (forked_)
    throw std::runtime_error(
        "torch_tpu: cannot use the tpu device in a forked subprocess after the parent "
        "initialised it. Use the 'spawn' start method (multiprocessing.set_start_method"
        "('spawn')), as with CUDA.");
  std::lock_guard<std::mutex> g(mu_);
  if (client_) return *client_;
  if (!init_error_.empty()) throw pjrt::Error(PJRT_Error_Code_FAILED_PRECONDITION, init_error_);
  if (plugin_path_.empty())
    throw pjrt::Error(PJRT_Error_Code_FAILED_PRECONDITION,
                      "torch_tpu: no PJRT plugin configured; import torch_tpu first");
  // The plugin's start-up log lines are noise to a user; they are shown only when
  // the start fails, or always with TORCH_TPU_LOG_LEVEL=info.
  pjrt::StderrCapture quiet(!plugin_logs_);
  try {
    auto plugin = pjrt::Plugin::load(plugin_path_);
    pjrt::ClientOptions opts;
    std::optional<CpuThreads> threads;
    if (platform_ == "cpu") {
      opts["cpu_device_count"] = cpu_device_count_;
      if (keep_cpu_heap_) keep_freed_host_memory();
      threads.emplace();
    }
    client_ = pjrt::Client::create(plugin, opts);
    if (platform_ == "cpu") register_host_gemm(plugin->api());
  } catch (const pjrt::Error& e) {
    std::string logs = quiet.release();
    init_error_ = std::string("torch_tpu: cannot start the '") + platform_ +
                  "' platform: " + e.what() + (logs.empty() ? "" : "\nplugin log:\n" + logs);
    throw pjrt::Error(e.code(), init_error_);
  }
  return *client_;
}

int Runtime::device_count() { return static_cast<int>(client().device_count()); }

void Runtime::check_device(int index) {
  int n = device_count();
  if (index < 0 || index >= n)
    throw std::out_of_range("tpu device index " + std::to_string(index) +
                            " is out of range: this process has " + std::to_string(n) +
                            " tpu device(s) (valid indices 0.." + std::to_string(n - 1) + ")");
}

Runtime::Mem& Runtime::mem(int device) {
  if (device < 0 || device >= static_cast<int>(mem_.size())) device = 0;
  return mem_[device];
}

void Runtime::note_alloc(int device, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  Mem& m = mem(device);
  m.live += bytes;
  m.count++;
  m.allocated_total += bytes;
  m.allocs_total++;
  if (m.live > m.peak) m.peak = m.live;
  if (m.count > m.peak_count) m.peak_count = m.count;
}

void Runtime::note_free(int device, int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  Mem& m = mem(device);
  m.live -= bytes;
  m.count--;
  m.freed_total += bytes;
  m.frees_total++;
}

Runtime::MemoryCounters Runtime::memory_counters(int device) const {
  std::lock_guard<std::mutex> g(mu_);
  return const_cast<Runtime*>(this)->mem(device);
}

void Runtime::reset_accumulated(int device) {
  std::lock_guard<std::mutex> g(mu_);
  Mem& m = mem(device);
  m.allocated_total = m.freed_total = m.allocs_total = m.frees_total = 0;
}

int64_t Runtime::memory_capacity(int device) {
  const size_t d = device < 0 || device >= 64 ? 0 : static_cast<size_t>(device);
  {
    std::lock_guard<std::mutex> g(mu_);
    if (capacity_[d] >= 0) return capacity_[d];
  }
  pjrt::MemoryStats st = client().memory_stats(device);
  int64_t cap = 0;
  if (st.available && st.bytes_limit > 0) {
    cap = st.bytes_limit;
  } else {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    cap = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  }
  std::lock_guard<std::mutex> g(mu_);
  if (limit_ > 0 && (cap == 0 || limit_ < cap)) cap = limit_;
  cap = static_cast<int64_t>(static_cast<double>(cap) * fraction_[d]);
  capacity_[d] = cap;
  return cap;
}

void Runtime::set_memory_limit(int64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  limit_ = bytes < 0 ? 0 : bytes;
  for (auto& c : capacity_) c = -1;
}

void Runtime::set_memory_fraction(int device, double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0))
    throw std::invalid_argument("invalid fraction " + std::to_string(fraction) +
                                ": the memory fraction must be in [0, 1]");
  std::lock_guard<std::mutex> g(mu_);
  const size_t d = device < 0 || device >= 64 ? 0 : static_cast<size_t>(device);
  fraction_[d] = fraction;
  capacity_[d] = -1;
}

namespace {
std::string gib(int64_t b) {
  char buf[64];
  if (b >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(int64_t(1) << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1 << 20));
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(b));
  return buf;
}
}  // namespace

void Runtime::check_fits(int device, int64_t bytes) {
  if (bytes <= 0) return;
  int64_t cap = memory_capacity(device);
  int64_t used = allocated(device);
  if (cap <= 0 || used + bytes <= cap) return;
  throw pjrt::Error(PJRT_Error_Code_RESOURCE_EXHAUSTED,
                    "tpu out of memory. Tried to allocate " + gib(bytes) + " (" +
                        std::to_string(bytes) + " bytes) on tpu:" + std::to_string(device) + "; " +
                        gib(used) + " already allocated of a " + gib(cap) +
                        " limit (" + std::to_string(cap) + " bytes; set by TORCH_TPU_MEMORY_LIMIT, "
                        "torch.tpu.set_per_process_memory_fraction or the device). Free tensors "
                        "you no longer need, or use smaller batches.");
}

std::pair<int64_t, int64_t> Runtime::memory_info(int device) {
  check_device(device);
  int64_t total = memory_capacity(device);
  pjrt::MemoryStats st = client().memory_stats(device);
  int64_t used = st.available && st.bytes_in_use >= 0 ? st.bytes_in_use : allocated(device);
  return {std::max<int64_t>(total - used, 0), total};
}

int64_t Runtime::allocated(int device) const {
  std::lock_guard<std::mutex> g(mu_);
  return const_cast<Runtime*>(this)->mem(device).live;
}
int64_t Runtime::peak(int device) const {
  std::lock_guard<std::mutex> g(mu_);
  return const_cast<Runtime*>(this)->mem(device).peak;
}
int64_t Runtime::alloc_count(int device) const {
  std::lock_guard<std::mutex> g(mu_);
  return const_cast<Runtime*>(this)->mem(device).count;
}
void Runtime::reset_peak(int device) {
  std::lock_guard<std::mutex> g(mu_);
  Mem& m = mem(device);
  m.peak = m.live;
  m.peak_count = m.count;
}

}  // namespace tpu::engine

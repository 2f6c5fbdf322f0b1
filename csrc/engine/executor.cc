#include "engine/executor.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "engine/metrics.h"
#include "engine/runtime.h"

namespace tpu::engine {

namespace {
std::atomic<bool> g_blocking{false};

// Completion events of launched programs, per device, for synchronize().
// Pruned of finished ones as it grows so that it stays small.
struct InFlight {
  std::mutex mu;
  std::vector<std::pair<int, std::unique_ptr<pjrt::Event>>> events;
};
InFlight& in_flight() {
  static auto* f = new InFlight();
  return *f;
}

void track(int device, const pjrt::Buffer& out) {
  auto ev = out.ready_event();
  auto& f = in_flight();
  std::lock_guard<std::mutex> g(f.mu);
  if (f.events.size() >= 256) {
    std::vector<std::pair<int, std::unique_ptr<pjrt::Event>>> keep;
    for (auto& e : f.events)
      if (!e.second->is_ready()) keep.push_back(std::move(e));
    f.events.swap(keep);
  }
  f.events.emplace_back(device, std::move(ev));
}
}  // namespace

void synchronize(int device) {
  std::vector<std::pair<int, std::unique_ptr<pjrt::Event>>> waiting;
  {
    auto& f = in_flight();
    std::lock_guard<std::mutex> g(f.mu);
    std::vector<std::pair<int, std::unique_ptr<pjrt::Event>>> keep;
    for (auto& e : f.events) {
      if (device < 0 || e.first == device) waiting.push_back(std::move(e));
      else keep.push_back(std::move(e));
    }
    f.events.swap(keep);
  }
  for (auto& e : waiting) e.second->await();
}

bool launch_blocking() { return g_blocking.load(std::memory_order_relaxed); }
void set_launch_blocking(bool on) { g_blocking = on; }

std::shared_ptr<pjrt::Executable> compile_program(const std::string& mlir, const std::string& what) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<pjrt::Executable> exe;
  try {
    exe = Runtime::get().client().compile(mlir);
  } catch (const pjrt::Error& e) {
    throw pjrt::Error(e.code(), "compiling " + what + " failed: " + e.what());
  }
  auto t1 = std::chrono::steady_clock::now();
  metrics().programs_compiled++;
  metrics().compile_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  return exe;
}

std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device, const std::string& what) {
  std::vector<std::shared_ptr<pjrt::Buffer>> out;
  try {
    out = exe.execute(args, device);
    metrics().executions++;
    if (!out.empty() && !launch_blocking()) track(device, *out[0]);
    if (launch_blocking())
      for (auto& b : out) b->await_ready();
  } catch (const pjrt::Error& e) {
    throw pjrt::Error(e.code(), what + ": " + e.what());
  }
  return out;
}

}  // namespace tpu::engine

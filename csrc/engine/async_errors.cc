#include "engine/async_errors.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/settings.h"
#include "engine/device_checks.h"
#include "engine/executor.h"

namespace tpu::engine {

namespace {

struct Failure {
  int device;
  std::string message;
  bool oom;
};

struct Failures {
  std::mutex mu;
  std::vector<Failure> list;
};
Failures& failures() {
  static auto* f = new Failures();
  return *f;
}

std::mutex g_fail_mu;
std::string g_fail_text;
std::atomic<bool> g_fail_on{[] {
  const char* v = settings::raw("TORCH_TPU_DEBUG_FAIL_EXECUTE");
  if (v == nullptr) return false;
  g_fail_text = v;
  return true;
}()};

}  // namespace

void note_async_failure(int device, const LaunchOrigin* origin, const std::string& error,
                        bool out_of_memory) {
  std::string msg = "tpu: ";
  msg += origin ? origin->what : std::string("a host-to-device copy");
  msg += " failed on the device after it was launched (asynchronous error, reported at the "
         "next synchronisation point): ";
  msg += error;
  if (origin && origin->where) {
    std::string w = origin->where();
    if (!w.empty()) msg += "\n" + w;
  }
  auto& f = failures();
  std::lock_guard<std::mutex> g(f.mu);
  // A loop that never synchronises must not grow this without bound; the
  // first failures are the ones worth reporting.
  if (f.list.size() < 64) f.list.push_back(Failure{device, std::move(msg), out_of_memory});
}

void raise_async_failures(int device) {
  collect_failed_launches();
  Failure first{-1, "", false};
  bool found = false;
  {
    auto& f = failures();
    std::lock_guard<std::mutex> g(f.mu);
    if (f.list.empty()) return;
    std::vector<Failure> keep;
    for (auto& x : f.list) {
      if (device >= 0 && x.device != device) keep.push_back(std::move(x));
      else if (!found) first = std::move(x), found = true;
    }
    f.list.swap(keep);
  }
  if (!found) return;
  if (first.oom) throw pjrt::Error(PJRT_Error_Code_RESOURCE_EXHAUSTED, first.message);
  throw CheckFailure(CheckSpec::kRuntimeError, first.message);
}

void raise_read_failure(const pjrt::Buffer& buf, const pjrt::Error& e) {
  int device = -1;
  try {
    device = buf.device_id();
  } catch (const pjrt::Error&) {
  }
  raise_async_failures(device);
  // Reported already (a second read of the same lost value), or not ours.
  throw pjrt::Error(e.code(), std::string("reading a tpu tensor whose value was never computed "
                                          "(the program that was to produce it failed): ") +
                                  e.what());
}

void set_fail_execute(const std::string& text) {
  std::lock_guard<std::mutex> g(g_fail_mu);
  g_fail_text = text;
  g_fail_on = !text.empty();
}

bool fail_execute_matches(const LaunchOrigin& origin) {
  if (!g_fail_on.load(std::memory_order_relaxed)) return false;
  std::string text;
  {
    std::lock_guard<std::mutex> g(g_fail_mu);
    text = g_fail_text;
  }
  if (text.empty()) return false;
  if (origin.what.find(text) != std::string::npos) return true;
  return origin.where && origin.where().find(text) != std::string::npos;
}

}  // namespace tpu::engine

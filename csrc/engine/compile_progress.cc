#include "engine/compile_progress.h"

#include "core/settings.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

namespace tpu::engine {

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  std::string what;
  Clock::time_point start;
  bool announced = false;
};

struct Watcher {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Running> running;
  uint64_t next_id = 1;
  pid_t pid = -1;  // the process whose thread watches (a forked child starts its own)
};

std::atomic<int64_t> g_lines{0};

Watcher& watcher() {
  static auto* w = new Watcher();  // never destroyed: the thread may outlive static destructors
  return *w;
}

double threshold_seconds() {
  static const double s = static_cast<double>(settings::number("TORCH_TPU_COMPILE_LOG_SECONDS"));
  return s;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void print(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  g_lines.fetch_add(1, std::memory_order_relaxed);
}

void watch(Watcher* w) {
  const double limit = threshold_seconds();
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    w->cv.wait_for(lock, std::chrono::milliseconds(250));
    for (auto& [id, r] : w->running) {
      if (r.announced || seconds_since(r.start) < limit) continue;
      r.announced = true;
      char buf[96];
      std::snprintf(buf, sizeof(buf), " has been compiling for %.0f s (%zu compile%s in flight)",
                    seconds_since(r.start), w->running.size(), w->running.size() == 1 ? "" : "s");
      print("torch_tpu: " + r.what + buf);
    }
  }
}

}  // namespace

CompileWatch::CompileWatch(std::string what) {
  if (!(threshold_seconds() > 0)) return;
  Watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.pid != getpid()) {
    w.pid = getpid();
    w.running.clear();
    std::thread(watch, &w).detach();
  }
  id_ = w.next_id++;
  w.running.emplace(id_, Running{std::move(what), Clock::now(), false});
}

CompileWatch::~CompileWatch() {
  if (id_ == 0) return;
  Watcher& w = watcher();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.running.find(id_);
  if (it == w.running.end()) return;
  // Also when the watcher had not woken yet: the time is what the user waited for.
  if (it->second.announced || seconds_since(it->second.start) >= threshold_seconds()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " compiled in %.1f s", seconds_since(it->second.start));
    print("torch_tpu: " + it->second.what + buf);
  }
  w.running.erase(it);
}

int64_t compile_progress_lines() { return g_lines.load(std::memory_order_relaxed); }

}  // namespace tpu::engine

#include "engine/compile_pool.h"

#include "core/settings.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace tpu::engine {

namespace {

struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable idle;  // signalled when a job (and its closure) is done
  std::deque<std::function<void()>> jobs;
  pid_t pid = -1;  // the process whose threads these are
  int started = 0;
  int running = 0;
  bool closed = false;  // the process is exiting: jobs run on the caller's thread
};

Pool& pool() {
  static auto* p = new Pool();  // never destroyed: workers may outlive static destructors
  return *p;
}

// Makes `p` this process's (call under p.mu): on first use, or in a forked child,
// whose parent's threads and jobs do not exist there.
void this_process(Pool& p) {
  if (p.pid == getpid()) return;
  p.pid = getpid();
  p.started = 0;
  p.running = 0;
  p.closed = false;
  p.jobs.clear();
}

void worker(Pool* p) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(p->mu);
      p->cv.wait(lock, [&] { return !p->jobs.empty(); });
      job = std::move(p->jobs.front());
      p->jobs.pop_front();
      ++p->running;
    }
    job();
    job = nullptr;  // its closure too is done before the job counts as ended
    {
      std::lock_guard<std::mutex> lock(p->mu);
      --p->running;
    }
    p->idle.notify_all();
  }
}

}  // namespace

int cpus_allowed() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int compile_threads() {
  static const int n = [] {
    if (tpu::settings::raw("TORCH_TPU_COMPILE_THREADS"))
      return static_cast<int>(std::max<int64_t>(0, tpu::settings::integer("TORCH_TPU_COMPILE_THREADS")));
    return std::min(8, cpus_allowed());
  }();
  return n;
}

void run_in_background(std::function<void()> job) {
  const int n = compile_threads();
  Pool& p = pool();
  {
    std::unique_lock<std::mutex> lock(p.mu);
    this_process(p);
    if (n == 0 || p.closed) {
      lock.unlock();
      job();
      return;
    }
    while (p.started < n) {
      std::thread(worker, &p).detach();
      ++p.started;
    }
    p.jobs.push_back(std::move(job));
  }
  p.cv.notify_one();
}

std::deque<std::function<void()>> close_background() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  this_process(p);  // so that a later job, too, sees the pool closed
  p.closed = true;
  return std::exchange(p.jobs, {});
}

void wait_background_idle() {
  Pool& p = pool();
  std::unique_lock<std::mutex> lock(p.mu);
  this_process(p);
  p.idle.wait(lock, [&] { return p.running == 0; });
}

}  // namespace tpu::engine

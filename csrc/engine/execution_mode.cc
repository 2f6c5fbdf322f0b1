#include "engine/execution_mode.h"

#include <atomic>

#include "engine/executor.h"

namespace tpu::engine {

namespace {
std::atomic<int> g_default{static_cast<int>(Mode::kStrictEager)};
thread_local int t_override = -1;
}  // namespace

Mode default_mode() { return static_cast<Mode>(g_default.load()); }
void set_default_mode(Mode m) { g_default = static_cast<int>(m); }
int thread_override() { return t_override; }
void set_thread_override(int m) { t_override = m; }

Mode current_mode() {
  if (launch_blocking()) return Mode::kStrictEager;
  return static_cast<Mode>(t_override >= 0 ? t_override : g_default.load(std::memory_order_relaxed));
}

}  // namespace tpu::engine

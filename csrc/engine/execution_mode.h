// Which execution mode new ops use: Strict Eager or Defer & Fuse.
// A process-wide default (TORCH_TPU_EXECUTION_MODE, set_execution_mode) and a
// per-thread override (the Python context manager). Launch blocking
// (TORCH_TPU_LAUNCH_BLOCKING=1) wins over both: every op runs synchronously.
#pragma once

namespace tpu::engine {

enum class Mode { kStrictEager = 0, kDeferAndFuse = 1 };

Mode default_mode();
void set_default_mode(Mode m);
// -1: no override on this thread.
int thread_override();
void set_thread_override(int mode_or_minus_one);
// The mode the next op on this thread runs in.
Mode current_mode();

}  // namespace tpu::engine

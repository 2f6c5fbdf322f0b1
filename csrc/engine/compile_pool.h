// A few background threads for compiling programs while the caller goes on.
//
// Strict Eager's first step compiles one small program per op signature, each
// ~0.1 s on the CPU plugin, one after the other: the step's cold time is the sum.
// A cold op whose program is not compiled yet is recorded instead of run
// (aten/op_kernel.cc, "pipelined"), its compile is handed to this pool, and the
// recorded ops launch in order at the next sync point, each waiting only for its
// own program: the compiles of independent ops overlap with each other and with
// the Python that records the rest of the step.
// Torch-free.
#pragma once

#include <deque>
#include <functional>

namespace tpu::engine {

// Queues `job` for a background thread (started on first use; again in a forked
// child, whose parent's threads do not exist there). Jobs must not throw.
void run_in_background(std::function<void()> job);

// At interpreter exit, in two steps. A job must neither run nor be destroyed
// once the process tears down: a compile then meets LLVM's destroyed statics
// (crashes), and a job's closure may hold Python references whose release then
// ends the thread inside a destructor (std::terminate).
// close_background: from now on jobs run on the caller's thread; returns the
// jobs not started, for the caller to drop where releasing their references is
// safe (holding the GIL). A dropped compile is redone by whoever needs it.
std::deque<std::function<void()>> close_background();
// wait_background_idle: waits until no job is running (call without the GIL:
// a job's closure may need it to end).
void wait_background_idle();

// Background threads: TORCH_TPU_COMPILE_THREADS when set (0: no pool: a job runs
// on the caller's thread, at once), else the CPUs this process may use, at most 8.
int compile_threads();

// CPUs this process may run on.
int cpus_allowed();

}  // namespace tpu::engine

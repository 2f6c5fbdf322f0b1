// One log line when a compile runs long, so that a cold start that sits in the
// compiler for tens of seconds does not look like a hang.
//
// Every compile (engine::compile_program) holds a CompileWatch while the plugin
// compiles. A watcher thread (started by the first watch) wakes every quarter
// second; a compile still running after TORCH_TPU_COMPILE_LOG_SECONDS gets one
// line on stderr naming it and how many others are in flight, and, when it ends,
// one more with its time (printed also when the compile ended between two wake-ups). Quick compiles print nothing. 0 turns the lines off.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace tpu::engine {

class CompileWatch {
 public:
  explicit CompileWatch(std::string what);
  ~CompileWatch();
  CompileWatch(const CompileWatch&) = delete;
  CompileWatch& operator=(const CompileWatch&) = delete;

 private:
  uint64_t id_ = 0;
};

// Lines printed so far (tests).
int64_t compile_progress_lines();

}  // namespace tpu::engine

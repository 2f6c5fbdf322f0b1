// Compiling and launching programs, shared by every execution mode.
// Torch-free: callers pass MLIR text and device buffers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace tpu::engine {

// Compiles `mlir` (counting compiles and their time in metrics). `what` names
// the op or graph for error messages. Throws pjrt::Error.
std::shared_ptr<pjrt::Executable> compile_program(const std::string& mlir, const std::string& what);

// Launches `exe` on `device`. With launch blocking (TORCH_TPU_LAUNCH_BLOCKING=1)
// waits for the outputs so that an error surfaces at the op that caused it.
std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device, const std::string& what);

// Waits for every program launched so far on `device` (-1: all devices);
// rethrows the first asynchronous error.
void synchronize(int device);

bool launch_blocking();
void set_launch_blocking(bool on);

}  // namespace tpu::engine

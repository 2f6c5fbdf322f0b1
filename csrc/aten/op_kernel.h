// The generic boxed kernel registered for every lowered op (see op_kernel.cc).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>

#include "hlo/builder.h"
#include "pjrt/pjrt.h"

namespace tpu::aten {

void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A device buffer holding one scalar value, cached by value.
std::shared_ptr<pjrt::Buffer> scalar_buffer(const void* bytes, hlo::ElemType elem, int device);

// Device-side checks (engine/device_checks.h) at a point where the host waits
// anyway: raises the first failed check of `device` (-1: all) as the exception
// PyTorch's CPU backend raises (IndexError, RuntimeError).
void raise_device_check_failures(int device = -1);

struct Entry;
// Registers the device-side checks of one launch of `e`'s single-op program,
// whose last output `flags` holds them; a failure names `where`.
void add_entry_checks(const std::shared_ptr<Entry>& e, std::shared_ptr<pjrt::Buffer> flags,
                      int device, std::string where);

void clear_program_cache();
// Strict Eager's pipelined compilation (op_kernel.cc): on unless switched off.
void set_pipelined_compile(bool on);
bool pipelined_compile();
size_t program_cache_size();

}  // namespace tpu::aten

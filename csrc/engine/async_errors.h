// Asynchronous run-time errors: a launched program (or transfer) that fails
// after its launch returned, as PJRT reports through its completion event.
//
// Like CUDA, the failure is reported at the next point where the host waits
// anyway (a read to the host, synchronize, an event wait), as the first check
// of engine::raise_failed_checks: one exception naming the op (or fused graph)
// that launched the failed work and, in Defer & Fuse, the Python lines that
// recorded its ops. Only the failed program's outputs are lost; the device
// and every other tensor stay usable.
//
// Torch-free: the aten layer turns the CheckFailure / pjrt::Error into Python's.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "pjrt/pjrt.h"

namespace tpu::engine {

// Who launched a piece of work, for the message of its failure.
struct LaunchOrigin {
  std::string what;                    // "aten::mul", "a fused graph of 12 ops (...)"
  std::function<std::string()> where;  // optional: its ops' Python lines
};

// Notes that work launched by `origin` (null: a transfer) failed with `error`
// (PJRT's message); raise_async_failures reports it.
void note_async_failure(int device, const LaunchOrigin* origin, const std::string& error,
                        bool out_of_memory);

// Collects launches that finished with an error, then throws the first noted
// failure on `device` (-1: any): a CheckFailure (RuntimeError), or a
// pjrt::Error with the out-of-memory code for a run-time OOM. The other
// failures noted for that device are dropped: one fault raises once.
void raise_async_failures(int device);

// A host read of `buf` failed with `e`: throws the failure of the work that
// was to produce it (named), or `e` said as a read of a value that was never
// computed.
[[noreturn]] void raise_read_failure(const pjrt::Buffer& buf, const pjrt::Error& e);

// Fault injection, to test the above without a faulty device: every launch
// whose op name (or fused graph's op list) contains `text` runs, then loses
// its outputs (PJRT_Buffer_Delete, so any read of them fails) and is tracked
// with a completion event that carries a failure, as a device fault would
// leave it. The launch itself returns normally. "" turns it off. Also set by
// TORCH_TPU_DEBUG_FAIL_EXECUTE=<text>.
void set_fail_execute(const std::string& text);
// The text set (""), read on every launch: kept cheap.
bool fail_execute_matches(const LaunchOrigin& origin);

}  // namespace tpu::engine

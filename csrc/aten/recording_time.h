// Host time the generic kernel spends recording each op in Defer & Fuse (wall
// clock inside the kernel; dispatcher, autograd and Python excluded), for
// benchmarks/defer_breakdown.py through torch_tpu._C._recording_by_op().
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "aten/op_info.h"

namespace tpu::aten {

struct OpRecordingTime {
  std::string op;
  uint64_t calls = 0;
  uint64_t ns = 0;
};

// Per recorded op: two relaxed atomic adds on the op's OpInfo (no lock, no map).
inline void add_recording_time(OpInfo* info, uint64_t ns) {
  info->recorded_calls.fetch_add(1, std::memory_order_relaxed);
  info->recorded_ns.fetch_add(ns, std::memory_order_relaxed);
}
// Every op recorded since the last reset; `reset` zeroes the counters.
std::vector<OpRecordingTime> recording_by_op(bool reset);

}  // namespace tpu::aten

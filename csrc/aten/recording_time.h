// Host time the generic kernel spends recording each op in Defer & Fuse (wall
// clock inside the kernel; dispatcher, autograd and Python excluded), for
// benchmarks/defer_breakdown.py through torch_tpu._C._recording_by_op().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpu::aten {

struct OpInfo;

struct OpRecordingTime {
  std::string op;
  uint64_t calls = 0;
  uint64_t ns = 0;
};

void add_recording_time(const OpInfo* info, uint64_t ns);
// Every op recorded since the last reset; `reset` zeroes the counters.
std::vector<OpRecordingTime> recording_by_op(bool reset);

}  // namespace tpu::aten

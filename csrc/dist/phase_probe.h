// Where a host-staged collective's time goes, for tuning the transport:
// with TORCH_TPU_DIST_PROFILE=1 each phase's count, total and fastest time is
// printed to stderr when the process exits (one line per phase, per rank).
// Off, a probe costs one branch on a cached flag.
#pragma once

#include <chrono>

namespace tpu::dist {

bool profiling();

// Adds the time since `start` to `phase` (a string literal).
void record_phase(const char* phase, std::chrono::steady_clock::time_point start);

// Times the enclosing scope as `phase` when profiling.
class PhaseProbe {
 public:
  explicit PhaseProbe(const char* phase) : phase_(profiling() ? phase : nullptr) {
    if (phase_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseProbe() {
    if (phase_ != nullptr) record_phase(phase_, start_);
  }
  PhaseProbe(const PhaseProbe&) = delete;
  PhaseProbe& operator=(const PhaseProbe&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tpu::dist

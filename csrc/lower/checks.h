// Device-side checks a lowering declares (see engine/device_checks.h for how
// they are collected and raised). Torch-free.
#pragma once

#include <string>

namespace tpu::lower {

// What a failed check raises; fixed when the program is built.
struct CheckSpec {
  enum Kind { kIndexError, kRuntimeError } kind = kIndexError;
  // The message, naming the op and the bound; "{}" becomes the offending value.
  std::string message;
};

// On unless TORCH_TPU_CHECKS=0. Programs built while off carry no checks (the
// op and fused-graph program caches keep the two kinds apart).
bool checks_enabled();
void set_checks_enabled(bool on);

}  // namespace tpu::lower

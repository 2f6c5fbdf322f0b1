// A cheap snapshot of the user's Python call stack, taken for every op that
// Defer & Fuse records. The node runs (and may fail) much later, at a flush far
// from the line that recorded it; the snapshot lets the error say where the op
// came from. Capturing holds no Python object and formatting needs no GIL, so
// a snapshot can be kept in the graph and dropped on any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace tpu::aten {

struct CodeSite;  // one code object's file and function name (interned)

class PyStack {
 public:
  // The innermost user frames (outside torch and torch_tpu), innermost first.
  // Empty on a thread without Python frames (autograd's backward workers) or
  // when capturing is switched off (TORCH_TPU_DEFER_STACKS=0).
  static PyStack capture();
  bool empty() const { return count_ == 0; }
  // "  File \"train.py\", line 42, in step" lines, outermost first (as Python
  // prints tracebacks).
  std::string format() const;

 private:
  // (code, instruction offset), innermost first: a fixed array, so that
  // capturing for every recorded op allocates nothing.
  static constexpr size_t kMaxFrames = 4;
  std::array<std::pair<const CodeSite*, int>, kMaxFrames> frames_{};
  uint8_t count_ = 0;
};

}  // namespace tpu::aten

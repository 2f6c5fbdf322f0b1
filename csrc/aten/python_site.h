// The user's Python line that caused the current C++ call, for reports such as
// "aten::foo fell back to the CPU first at train.py:42 in step".
// Implemented in python_stack.cc, which owns walking Python frames.
#pragma once

#include <string>

namespace tpu::aten {

// "file:line in function" of the innermost Python frame outside torch and
// torch_tpu (the innermost frame at all when every frame is theirs). Takes the
// GIL; meant for rare events (first occurrence of something), not per-op use.
std::string python_site();

}  // namespace tpu::aten

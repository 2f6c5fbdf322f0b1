// Pinned host memory for tpu (pinned_memory.cc): the allocator the PrivateUse1
// hooks hand to Tensor.pin_memory(), and whether a host pointer came from it.
#pragma once

#include <c10/core/Allocator.h>

namespace tpu::aten {

c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* data);

}  // namespace tpu::aten

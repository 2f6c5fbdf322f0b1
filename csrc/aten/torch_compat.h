// The one place for differences between the torch releases torch_tpu builds against
// (2.11 to 2.15; docs/compat.md). Sources include this header instead of testing torch
// versions themselves; each difference is detected by what the headers provide, so a
// release in between needs no entry of its own.
#pragma once

// Named tensors (at::Dimname, at::DimnameList, ATen/core/Dimname.h) are gone from torch
// 2.13 on, but torch 2.11's autocast redispatch list (AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE)
// still names DimnameList, unqualified, as code inside namespace at would. autocast.cc
// makes this namespace's names visible where it expands that list.
#if __has_include(<ATen/core/Dimname.h>)
#include <ATen/core/Dimname.h>
namespace tpu::compat::autocast_signature_names {
using at::DimnameList;
}  // namespace tpu::compat::autocast_signature_names
#else
namespace tpu::compat::autocast_signature_names {}
#endif

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

// c10d (the distributed backend, csrc/dist).
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/headeronly/version.h>

namespace tpu::compat {
// PREMUL_SUM's factor: torch 2.11 has only NCCLPreMulSumSupplement; 2.13 renamed it
// PreMulSumSupplement and keeps the old name as an alias, so the old name is right up to
// 2.12 whichever of the two 2.12 defines. (A version test: a struct's existence cannot be
// detected without declaring it, which would clash with 2.13's alias.)
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#endif

// The Work type of reduce_scatter_tensor_coalesced: OpType::REDUCE_SCATTER_TENSOR_COALESCED
// where the release has it (not in 2.11), else COALESCED, as this backend already uses
// for all-gathers of tensor lists.
template <class Op>
constexpr auto reduce_scatter_coalesced_op(int) -> decltype(Op::REDUCE_SCATTER_TENSOR_COALESCED) {
  return Op::REDUCE_SCATTER_TENSOR_COALESCED;
}
template <class Op>
constexpr Op reduce_scatter_coalesced_op(long) {
  return Op::COALESCED;
}
inline constexpr c10d::OpType kReduceScatterTensorCoalesced =
    reduce_scatter_coalesced_op<c10d::OpType>(0);
}  // namespace tpu::compat

// What the generic kernel needs to know about an ATen op, derived once from its
// schema: how each argument enters a program, which arguments it writes, and
// which lowering serves it (its own, or the functional form of an in-place /
// out= overload).
#pragma once

#include <atomic>

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <vector>

#include "lower/registry.h"

namespace tpu::aten {

enum class ArgClass {
  kTensor,         // Tensor, Tensor?
  kTensorList,     // Tensor[]
  kOptTensorList,  // Tensor?[] (index)
  kScalar,         // Scalar, Scalar?, float, float?  (runtime values)
  kScalarList,     // Scalar[], float[]               (runtime values)
  kGenerator,      // Generator?
  kOther           // structural: int, int[], bool, str, dtype, device ...
};

struct OpInfo {
  enum Form { kOwn, kInplace, kOut } form = kOwn;
  const lower::Lowering* lowering = nullptr;
  std::string name;              // "aten::add_.Tensor"
  std::vector<ArgClass> arg_class;
  std::vector<int> mutated;      // indices of arguments the op writes
  // Flips to false once a meta kernel is missing; atomic because ops run on many threads.
  std::atomic<bool> has_meta{true};
  bool has_out = false;          // has out= arguments (an out= form, or a lowering named after one)
  // Whether a program of this op has depended on torch.set_float32_matmul_precision
  // (a float32 dot or convolution); until then its keys leave the setting out,
  // and calls do not read it (a PyTorch map lookup per op). See entry_for.
  std::atomic<bool> reads_precision{false};
  // Defer & Fuse recording time of this op (aten/recording_time.h): relaxed
  // atomics, so that the per-op tally takes no lock and no map lookup.
  std::atomic<uint64_t> recorded_calls{0};
  std::atomic<uint64_t> recorded_ns{0};
};

// The OpInfo of `op`, or nullptr when no lowering serves it.
OpInfo* op_info(const c10::OperatorHandle& op);

// Calls `fn` on every OpInfo made so far.
void for_each_op_info(const std::function<void(OpInfo&)>& fn);

// Every dispatcher op of namespace `ns` ("aten", "tpu", a library's) served by a
// lowering (own name, in-place or out= form); every namespace when `ns` is empty.
std::vector<c10::OperatorHandle> lowered_ops(const std::string& ns = "");

std::string full_name(const c10::OperatorName& n);

}  // namespace tpu::aten

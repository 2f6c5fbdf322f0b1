// What the generic kernel needs to know about an ATen op, derived once from its
// schema: how each argument enters a program, which arguments it writes, and
// which lowering serves it (its own, or the functional form of an in-place /
// out= overload).
#pragma once

#include <atomic>

#include <ATen/core/dispatch/Dispatcher.h>

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
};

// The OpInfo of `op`, or nullptr when no lowering serves it.
OpInfo* op_info(const c10::OperatorHandle& op);

// Every dispatcher op served by a lowering (own name, in-place or out= form).
std::vector<c10::OperatorHandle> lowered_ops();

std::string full_name(const c10::OperatorName& n);

}  // namespace tpu::aten

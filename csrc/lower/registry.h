// The one lowering registry: ATen op -> StableHLO.
//
// A lowering receives builder values for its tensor inputs and its non-tensor
// arguments (as c10::IValue) through a Ctx, and returns the values of the op's
// functional results. Strict Eager wraps one lowering in a program, Defer & Fuse
// chains many, and the torch.compile backend walks an FX graph through the same
// entries: an op is lowered once, here.
//
// Runtime scalars: arguments of schema type Scalar, Scalar?, Scalar[] and
// float/float? never change a program's structure. The caller turns each into a
// program parameter (f64, i64, i1 or complex per the value's kind) and the
// lowering reads it with Ctx::scalar(). Changing a learning rate or an `alpha`
// therefore reuses the compiled program. A lowering that needs such a value
// structurally declares the argument in Lowering::static_args.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hlo/builder.h"
#include "lower/checks.h"

namespace tpu::lower {

hlo::ElemType to_elem(c10::ScalarType t);   // throws c10::TypeError for unsupported dtypes
c10::ScalarType to_scalar_type(hlo::ElemType t);

// One schema argument as the lowering sees it.
struct Arg {
  enum Kind { kTensor, kTensorList, kNone, kScalar, kScalarList, kOther } kind = kOther;
  hlo::Value tensor;                  // kTensor
  std::vector<hlo::Value> tensors;    // kTensorList (undefined entries have id -1)
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kTensor: the torch dtype
  std::vector<c10::ScalarType> dtypes;                 // kTensorList
  bool wrapped_number = false;        // kTensor: a 0-dim tensor made from a Python number
  hlo::Value scalar;                  // kScalar: runtime parameter (rank 0)
  std::vector<hlo::Value> scalars;    // kScalarList: one rank-0 value per element
  c10::IValue value;                  // the IValue (kScalar/kOther/kScalarList), for reading
};

// Facts about one result that the caller knows (from PyTorch's meta kernels).
struct OutMeta {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // the meta kernel's layout of the result
};

class Ctx {
 public:
  Ctx(hlo::Builder& b, const c10::FunctionSchema& schema, std::vector<Arg> args,
      std::vector<OutMeta> out_meta)
      : b(b), schema_(schema), args_(std::move(args)), out_meta_(std::move(out_meta)) {}

  hlo::Builder& b;

  const c10::FunctionSchema& schema() const { return schema_; }
  size_t num_args() const { return args_.size(); }
  const Arg& arg(size_t i) const { return args_.at(i); }

  // Tensor arguments.
  hlo::Value tensor(size_t i) const;
  std::optional<hlo::Value> opt_tensor(size_t i) const;  // nullopt for None
  std::vector<hlo::Value> tensors(size_t i) const;
  c10::ScalarType dtype(size_t i) const;
  bool is_none(size_t i) const { return arg(i).kind == Arg::kNone; }

  // Runtime scalars, converted to `t`.
  hlo::Value scalar(size_t i, hlo::ElemType t) const;
  std::vector<hlo::Value> scalar_list(size_t i, hlo::ElemType t) const;
  // The kind of a Scalar argument's value (Double, Long, Bool, ComplexDouble).
  c10::ScalarType scalar_kind(size_t i) const;

  // Structural arguments (ints, int lists, bools, strings, dtypes...).
  const c10::IValue& value(size_t i) const { return arg(i).value; }
  int64_t int_arg(size_t i) const;
  std::vector<int64_t> ints(size_t i) const;
  std::optional<int64_t> opt_int(size_t i) const;
  bool bool_arg(size_t i) const;
  double double_arg(size_t i) const;  // only for static_args or kOther floats
  std::string str_arg(size_t i) const;
  std::optional<c10::ScalarType> opt_dtype(size_t i) const;

  // Results as PyTorch's meta kernels computed them (empty when unknown).
  const std::vector<OutMeta>& out_meta() const { return out_meta_; }
  c10::ScalarType out_dtype(size_t k) const;

  // Random state for ops that draw numbers: a u64[2] value (seed, offset) fed at
  // run time. `numbers` is how many 32-bit draws the op consumes; the caller
  // advances the generator's offset by that many.
  hlo::Value rng_state(uint64_t numbers);
  uint64_t rng_numbers() const { return rng_numbers_; }
  bool uses_rng() const { return rng_param_.valid(); }
  void set_rng_param(hlo::Value v) { rng_param_ = v; }

  // Device-side checks (lower/checks.h, engine/device_checks.h): `bad` (pred,
  // any shape) marks the elements that fail, `value` (integer, bad's shape or
  // broadcastable) their offending values, of which the largest is reported.
  // The caller makes them program outputs; nothing happens when checks are off.
  void check(hlo::Value bad, hlo::Value value, CheckSpec spec);
  // Fails where `index` is outside [0, size), or [-size, size) with allow_negative.
  void check_index(hlo::Value index, int64_t size, bool allow_negative, CheckSpec spec);
  // Integer division or remainder by zero raises RuntimeError("ZeroDivisionError")
  // on the CPU; `divisor` of a float or complex type needs no check.
  void check_divisor(hlo::Value divisor);
  struct Check {
    hlo::Value failed;  // pred[]
    hlo::Value value;   // s64[]
    CheckSpec spec;
  };
  const std::vector<Check>& checks() const { return checks_; }

 private:
  std::vector<Check> checks_;
  const c10::FunctionSchema& schema_;
  std::vector<Arg> args_;
  std::vector<OutMeta> out_meta_;
  hlo::Value rng_param_;
  uint64_t rng_numbers_ = 0;
};

using LowerFn = std::function<std::vector<hlo::Value>(Ctx&)>;

struct Lowering {
  std::string name;        // "aten::add.Tensor" (functional overload)
  LowerFn fn;
  std::vector<int> static_args;  // Scalar/float args whose value is structural
  bool needs_rng = false;        // the caller must supply an rng parameter
  // PyTorch's meta kernel for the op is unusable (it fails on valid arguments):
  // result dtypes and shapes come from the lowering's values instead.
  bool skip_meta = false;
  // The op updates what it writes in place: Strict Eager donates the written
  // buffer to the program when nothing else holds it (a KV cache write must not
  // copy the cache per step); a fused program (Defer & Fuse, torch.compile)
  // aliases and donates the storage it updates (build() in aten/deferred_graph.cc). A failed device-side check then leaves the op's
  // valid writes in place instead of undoing the whole write (the undo's select
  // of old and new contents would need the old copy): the lowering drops the bad
  // elements itself. Opt-in per op: buffers that alias host memory (host-staged
  // collectives' results) must not be written in place.
  bool in_place = false;
  // Every Scalar argument only ever becomes self's (argument 0's) dtype
  // (c.scalar(i, self's type)): the caller passes an integral one as a double when
  // self is floating and the value is exact as a double, the same answer, so that
  // `masked_fill(m, 0)` and `masked_fill(m, -inf)` share one program (Call::walk).
  bool scalars_as_self = false;
};

// Registers `fn` for the functional overload `name` ("aten::add.Tensor", or
// "aten::relu" for the default overload). The in-place (`add_.Tensor`) and out=
// (`add.out`) forms are served by the same entry.
void add(const std::string& name, LowerFn fn, std::vector<int> static_args = {},
         bool needs_rng = false);

// Marks a registered lowering's op as having an unusable meta kernel (Lowering::skip_meta).
void skip_meta(const std::string& name);
// Marks a registered lowering as Lowering::in_place.
void update_in_place(const std::string& name);
// Marks a registered lowering as Lowering::scalars_as_self.
void scalars_as_self(const std::string& name);

const Lowering* find(const std::string& name);
const std::unordered_map<std::string, Lowering>& all();

// Called once at start-up by the lowering files' registration functions.
void register_all();

}  // namespace tpu::lower

// Private state of hlo::Builder and helpers shared by the builder_*.cc files.
// Not part of the public API: only csrc/hlo includes it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "hlo/builder.h"

namespace tpu::hlo {

// Throws std::invalid_argument("stablehlo.<op>: <what>").
[[noreturn]] void fail(const std::string& op, const std::string& what);

// ReduceOp as its StableHLO binary op ("add", "maximum", ...); the check names the
// outer op when the element type does not suit it; the body is a one-op region.
// Shared by the region ops (builder_regions.cc) and the collectives.
const char* reduce_op_name(ReduceOp op);
void check_reduce_op(const std::string& op, ReduceOp r, ElemType t);
RegionFn binary_body(ReduceOp r);

std::string dims_str(const std::vector<int64_t>& v);   // "[2, 3]"
std::string i64_array(const std::vector<int64_t>& v);  // "array<i64: 2, 3>"
// "dense<[[lo, hi], ...]> : tensor<Nx2xi64>"
std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& p);
// Literal text of one element of type t (used inside dense<...>).
std::string float_literal(double f, ElemType t);
std::string int_literal(int64_t i, ElemType t);

// Checks that `dims` lists distinct dimensions in [0, rank); `what` names the list.
void check_dim_list(const std::string& op, const std::vector<int64_t>& dims, int64_t rank,
                    const std::string& what);
TensorType scalar_of(ElemType t);
// Size of one windowed output dimension (convolution, reduce_window,
// select_and_scatter): input dilated by lhs_dil and padded, window dilated by win_dil.
int64_t window_output_size(int64_t in, int64_t lhs_dil, int64_t lo, int64_t hi, int64_t win,
                           int64_t win_dil, int64_t stride);

struct Builder::Impl {
  std::string module_name;

  // Indexed by Value::id.
  std::vector<std::string> names;  // "%v3", "%v7#1", "%arg0"
  std::vector<TensorType> types;
  std::vector<int> scopes;  // region that defined the value (0 = function body)

  // Regions currently being built, innermost last. A value may be used only while
  // the region that defined it is open, which catches a region value escaping.
  std::vector<int> open_scopes{0};
  int next_scope = 1;

  struct Param {
    int id;
    TensorType type;
    int donate;
  };
  std::vector<Param> params;
  std::vector<Value> results;
  bool finished = false;

  std::string body;            // function body text
  std::string* out = &body;    // where ops are appended (a region buffer while in one)
  int depth = 2;               // indent level of the op being emitted (2 spaces each)
  mutable std::string text;    // module text, built once after ret()
  Precision f32_precision = Precision::HIGHEST;  // set_float32_precision()

  // ", precision_config = [...]" for dot/convolution operands of type t, or "".
  std::string precision_attr(ElemType t) const;

  void ensure_open() const;
  // Name of `v` for use as an operand of `op`; validates it belongs here.
  const std::string& use(const std::string& op, const Value& v) const;
  Value def(const TensorType& t, const std::string& name);
  // Allocates result values; one result is "%vN", several are "%vN#i".
  std::vector<Value> def_results(const std::vector<TensorType>& ts);
  std::string lhs(const std::vector<Value>& results) const;
  void line(const std::string& s);

  // Emits `<results> = "<op>"(<operands>) <regions> {<attrs>} : (<types>) -> <types>`.
  std::vector<Value> emit(const std::string& op, const std::vector<Value>& operands,
                          const std::vector<std::string>& regions, const std::string& attrs,
                          const std::vector<TensorType>& result_types);

  // Builds one region: block arguments of `arg_types`, body from `fn`, yielding
  // values that must have `ret_types`. Returns "{ ... }" text.
  std::string region(Builder& b, const std::string& op, const std::vector<TensorType>& arg_types,
                     const RegionFn& fn, const std::vector<TensorType>& ret_types);
};

}  // namespace tpu::hlo

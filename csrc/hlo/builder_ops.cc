// Elementwise and shape ops: operand checks and result types.
#include <algorithm>
#include <set>

#include "hlo/builder_impl.h"

namespace tpu::hlo {
namespace {

enum class Kind { Any, Numeric, FloatOrComplex, Float, IntOrPred, Int, SignedOrFloat };

bool kind_ok(Kind k, ElemType t) {
  const bool fl = is_float(t), cx = is_complex(t), si = is_signed_int(t), ui = is_unsigned_int(t);
  switch (k) {
    case Kind::Any: return true;
    case Kind::Numeric: return t != ElemType::PRED;
    case Kind::FloatOrComplex: return fl || cx;
    case Kind::Float: return fl;
    case Kind::IntOrPred: return si || ui || t == ElemType::PRED;
    case Kind::Int: return si || ui;
    case Kind::SignedOrFloat: return si || fl || cx;
  }
  return false;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Any: return "any";
    case Kind::Numeric: return "a numeric (non-i1)";
    case Kind::FloatOrComplex: return "a float or complex";
    case Kind::Float: return "a float";
    case Kind::IntOrPred: return "an integer or i1";
    case Kind::Int: return "an integer";
    case Kind::SignedOrFloat: return "a signed integer, float or complex";
  }
  return "";
}

// Which element types each named elementwise op accepts. Every StableHLO
// unary / binary elementwise op is listed: a name outside the lists is a typo
// (or an op the builder has no rule for yet) and is rejected when the program is
// built, instead of reaching the compiler as an unknown op with a guessed type.
Kind unary_kind(const std::string& op, bool* known) {
  static const std::set<std::string> fc = {
      "exponential", "log", "sqrt", "rsqrt", "tanh", "logistic", "cosine", "sine", "tan",
      "log_plus_one", "exponential_minus_one", "cbrt"};
  static const std::set<std::string> f = {"floor", "ceil", "round_nearest_even",
                                          "round_nearest_afz", "is_finite"};
  *known = true;
  if (fc.count(op)) return Kind::FloatOrComplex;
  if (f.count(op)) return Kind::Float;
  if (op == "not") return Kind::IntOrPred;
  if (op == "popcnt" || op == "count_leading_zeros") return Kind::Int;
  if (op == "negate") return Kind::Numeric;
  if (op == "abs" || op == "sign") return Kind::SignedOrFloat;
  if (op == "real" || op == "imag") return Kind::FloatOrComplex;
  *known = false;
  return Kind::Any;
}

Kind binary_kind(const std::string& op, bool* known) {
  *known = true;
  if (op == "and" || op == "or" || op == "xor") return Kind::IntOrPred;
  if (op == "shift_left" || op == "shift_right_arithmetic" || op == "shift_right_logical")
    return Kind::Int;
  if (op == "atan2") return Kind::FloatOrComplex;
  if (op == "divide" || op == "remainder" || op == "power" || op == "subtract") return Kind::Numeric;
  if (op == "complex") return Kind::Float;
  if (op == "add" || op == "multiply" || op == "maximum" || op == "minimum") return Kind::Any;
  *known = false;
  return Kind::Any;
}

ElemType real_part(ElemType t) {
  if (t == ElemType::C64) return ElemType::F32;
  if (t == ElemType::C128) return ElemType::F64;
  return t;
}

void check_int_scalar(const std::string& op, const Value& v, const char* what) {
  if (v.rank() != 0 || !(is_signed_int(v.elem()) || is_unsigned_int(v.elem())))
    fail(op, std::string(what) + " must be rank-0 integers, got " + v.type.str());
}

}  // namespace

Value Builder::unary(const std::string& op, Value a) {
  bool known = false;
  Kind k = unary_kind(op, &known);
  if (!known) fail(op, "is not a StableHLO unary elementwise op (misspelled?)");
  if (!kind_ok(k, a.elem()))
    fail(op, std::string("operand must be ") + kind_name(k) + " tensor, got " + a.type.str());
  TensorType rt = a.type;
  if (op == "is_finite") rt.elem = ElemType::PRED;
  if (op == "real" || op == "imag" || (op == "abs" && is_complex(a.elem())))
    rt.elem = real_part(a.elem());
  return impl_->emit(op, {a}, {}, "", {rt})[0];
}

Value Builder::binary(const std::string& op, Value a, Value b) {
  if (a.type != b.type)
    fail(op, "operand types differ: " + a.type.str() + " vs " + b.type.str());
  bool known = false;
  Kind k = binary_kind(op, &known);
  if (!known) fail(op, "is not a StableHLO binary elementwise op (misspelled?)");
  if (!kind_ok(k, a.elem()))
    fail(op, std::string("operands must be ") + kind_name(k) + " tensors, got " + a.type.str());
  TensorType rt = a.type;
  if (op == "complex") {
    if (a.elem() != ElemType::F32 && a.elem() != ElemType::F64)
      fail(op, "operands must be f32 or f64, got " + a.type.str());
    rt.elem = a.elem() == ElemType::F32 ? ElemType::C64 : ElemType::C128;
  }
  return impl_->emit(op, {a, b}, {}, "", {rt})[0];
}

Value Builder::compare(Value a, Value b, Cmp dir) {
  if (a.type != b.type)
    fail("compare", "operand types differ: " + a.type.str() + " vs " + b.type.str());
  static const char* dirs[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
  const char* d = dirs[static_cast<int>(dir)];
  // XLA compares complex numbers with the FLOAT type; they have no order.
  const char* ct = "FLOAT";
  if (is_signed_int(a.elem())) ct = "SIGNED";
  if (is_unsigned_int(a.elem()) || a.elem() == ElemType::PRED) ct = "UNSIGNED";
  if (is_complex(a.elem()) && dir != Cmp::EQ && dir != Cmp::NE)
    fail("compare", std::string("complex operands support only EQ/NE, got ") + d);
  std::string attrs = std::string("comparison_direction = #stablehlo<comparison_direction ") + d +
                      ">, compare_type = #stablehlo<comparison_type " + ct + ">";
  return impl_->emit("compare", {a, b}, {}, attrs, {TensorType{ElemType::PRED, a.dims()}})[0];
}

Value Builder::select(Value pred, Value on_true, Value on_false) {
  if (on_true.type != on_false.type)
    fail("select", "branch types differ: " + on_true.type.str() + " vs " + on_false.type.str());
  if (pred.elem() != ElemType::PRED || (pred.rank() != 0 && pred.dims() != on_true.dims()))
    fail("select", "predicate must be i1 of rank 0 or of the branches' shape, got " +
                       pred.type.str() + " for " + on_true.type.str());
  return impl_->emit("select", {pred, on_true, on_false}, {}, "", {on_true.type})[0];
}

Value Builder::clamp(Value lo, Value x, Value hi) {
  for (const Value* v : {&lo, &hi})
    if (v->elem() != x.elem() || (v->rank() != 0 && v->dims() != x.dims()))
      fail("clamp", "bound " + v->type.str() + " must be rank 0 or match operand " + x.type.str());
  if (x.elem() == ElemType::PRED || is_complex(x.elem()))
    fail("clamp", "operand must be an integer or float tensor, got " + x.type.str());
  return impl_->emit("clamp", {lo, x, hi}, {}, "", {x.type})[0];
}

Value Builder::convert(Value a, ElemType to) {
  if (a.elem() == to) {
    impl_->use("convert", a);
    return a;
  }
  return impl_->emit("convert", {a}, {}, "", {TensorType{to, a.dims()}})[0];
}

Value Builder::bitcast_convert(Value a, const TensorType& to) {
  const int wa = bit_width(a.elem()), wt = bit_width(to.elem);
  if (a.elem() == ElemType::PRED || to.elem == ElemType::PRED)
    fail("bitcast_convert", "i1 has no bit layout to reinterpret");
  std::vector<int64_t> expect = a.dims();
  if (wa > wt) {
    expect.push_back(wa / wt);  // a wider element splits into a new minor dimension
  } else if (wa < wt) {
    if (a.rank() == 0 || a.dims().back() != wt / wa)
      fail("bitcast_convert", a.type.str() + " needs a minor dimension of " +
                                  std::to_string(wt / wa) + " to become " + mlir_name(to.elem));
    expect.pop_back();
  }
  if (expect != to.dims)
    fail("bitcast_convert", "cannot reinterpret " + a.type.str() + " as " + to.str());
  return impl_->emit("bitcast_convert", {a}, {}, "", {to})[0];
}

// ---- shape --------------------------------------------------------------------

Value Builder::reshape(Value a, const std::vector<int64_t>& dims) {
  TensorType rt{a.elem(), dims};
  for (int64_t d : dims)
    if (d < 0) fail("reshape", "negative dimension in " + dims_str(dims));
  if (rt.numel() != a.type.numel())
    fail("reshape", "cannot reshape " + a.type.str() + " to " + rt.str());
  if (dims == a.dims()) {
    impl_->use("reshape", a);
    return a;
  }
  return impl_->emit("reshape", {a}, {}, "", {rt})[0];
}

Value Builder::transpose(Value a, const std::vector<int64_t>& permutation) {
  if (static_cast<int64_t>(permutation.size()) != a.rank())
    fail("transpose", "permutation " + dims_str(permutation) + " for " + a.type.str());
  check_dim_list("transpose", permutation, a.rank(), "permutation");
  TensorType rt{a.elem(), {}};
  for (int64_t p : permutation) rt.dims.push_back(a.dims()[p]);
  return impl_->emit("transpose", {a}, {}, "permutation = " + i64_array(permutation), {rt})[0];
}

Value Builder::broadcast_in_dim(Value a, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& broadcast_dims) {
  const std::string op = "broadcast_in_dim";
  if (static_cast<int64_t>(broadcast_dims.size()) != a.rank())
    fail(op, "broadcast_dimensions " + dims_str(broadcast_dims) + " for operand " + a.type.str());
  check_dim_list(op, broadcast_dims, static_cast<int64_t>(dims.size()), "broadcast_dimensions");
  for (int64_t d : dims)
    if (d < 0) fail(op, "negative dimension in " + dims_str(dims));
  for (size_t i = 0; i < broadcast_dims.size(); ++i) {
    int64_t od = a.dims()[i], rd = dims[broadcast_dims[i]];
    if (od != 1 && od != rd)
      fail(op, "operand " + a.type.str() + " dimension " + std::to_string(i) +
                   " cannot broadcast to " + dims_str(dims));
  }
  return impl_->emit(op, {a}, {}, "broadcast_dimensions = " + i64_array(broadcast_dims),
                     {TensorType{a.elem(), dims}})[0];
}

Value Builder::broadcast_to(Value a, const std::vector<int64_t>& dims) {
  if (a.rank() > static_cast<int64_t>(dims.size()))
    fail("broadcast_in_dim", "cannot broadcast " + a.type.str() + " to " + dims_str(dims));
  if (a.dims() == dims) {
    impl_->use("broadcast_in_dim", a);
    return a;
  }
  const int64_t off = static_cast<int64_t>(dims.size()) - a.rank();
  std::vector<int64_t> bd;
  for (int64_t i = 0; i < a.rank(); ++i) {
    if (a.dims()[i] != 1 && a.dims()[i] != dims[off + i])
      fail("broadcast_in_dim", "cannot broadcast " + a.type.str() + " to " + dims_str(dims));
    bd.push_back(off + i);
  }
  return broadcast_in_dim(a, dims, bd);
}

std::vector<int64_t> broadcast_shapes(const std::vector<int64_t>& a,
                                      const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> r(n);
  for (size_t i = 0; i < n; ++i) {
    // Right-aligned: missing leading dims count as 1.
    int64_t x = i + a.size() >= n ? a[i + a.size() - n] : 1;
    int64_t y = i + b.size() >= n ? b[i + b.size() - n] : 1;
    if (x != y && x != 1 && y != 1)
      throw std::invalid_argument("broadcast_shapes: incompatible shapes " + dims_str(a) + " and " +
                                  dims_str(b));
    r[i] = x == 1 ? y : x;
  }
  return r;
}

Value Builder::slice(Value a, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
                     const std::vector<int64_t>& strides) {
  const size_t r = static_cast<size_t>(a.rank());
  if (start.size() != r || limit.size() != r || strides.size() != r)
    fail("slice", "start/limit/strides must each have " + std::to_string(r) + " entries");
  TensorType rt{a.elem(), {}};
  for (size_t i = 0; i < r; ++i) {
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > a.dims()[i] || strides[i] < 1)
      fail("slice", "bad bounds start " + dims_str(start) + " limit " + dims_str(limit) +
                        " strides " + dims_str(strides) + " for " + a.type.str());
    rt.dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  std::string attrs = "start_indices = " + i64_array(start) + ", limit_indices = " +
                      i64_array(limit) + ", strides = " + i64_array(strides);
  return impl_->emit("slice", {a}, {}, attrs, {rt})[0];
}

Value Builder::dynamic_slice(Value a, const std::vector<Value>& starts,
                             const std::vector<int64_t>& sizes) {
  const std::string op = "dynamic_slice";
  if (static_cast<int64_t>(starts.size()) != a.rank() ||
      static_cast<int64_t>(sizes.size()) != a.rank())
    fail(op, "need one start index and one size per dimension of " + a.type.str());
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] < 0 || sizes[i] > a.dims()[i])
      fail(op, "slice_sizes " + dims_str(sizes) + " exceed " + a.type.str());
  std::vector<Value> ops{a};
  for (const auto& s : starts) {
    check_int_scalar(op, s, "start indices");
    if (s.elem() != starts[0].elem()) fail(op, "start indices must share one type");
    ops.push_back(s);
  }
  return impl_->emit(op, ops, {}, "slice_sizes = " + i64_array(sizes),
                     {TensorType{a.elem(), sizes}})[0];
}

Value Builder::dynamic_update_slice(Value a, Value update, const std::vector<Value>& starts) {
  const std::string op = "dynamic_update_slice";
  if (update.elem() != a.elem() || update.rank() != a.rank())
    fail(op, "update " + update.type.str() + " does not fit operand " + a.type.str());
  for (int64_t i = 0; i < a.rank(); ++i)
    if (update.dims()[i] > a.dims()[i])
      fail(op, "update " + update.type.str() + " larger than operand " + a.type.str());
  if (static_cast<int64_t>(starts.size()) != a.rank())
    fail(op, "need one start index per dimension of " + a.type.str());
  std::vector<Value> ops{a, update};
  for (const auto& s : starts) {
    check_int_scalar(op, s, "start indices");
    if (s.elem() != starts[0].elem()) fail(op, "start indices must share one type");
    ops.push_back(s);
  }
  return impl_->emit(op, ops, {}, "", {a.type})[0];
}

Value Builder::concatenate(const std::vector<Value>& parts, int64_t dim) {
  if (parts.empty()) fail("concatenate", "needs at least one operand");
  const Value& p0 = parts[0];
  if (dim < 0 || dim >= p0.rank())
    fail("concatenate", "dimension " + std::to_string(dim) + " out of range for " + p0.type.str());
  TensorType rt = p0.type;
  rt.dims[dim] = 0;
  for (const auto& p : parts) {
    bool ok = p.elem() == p0.elem() && p.rank() == p0.rank();
    for (int64_t i = 0; ok && i < p0.rank(); ++i)
      if (i != dim && p.dims()[i] != p0.dims()[i]) ok = false;
    if (!ok)
      fail("concatenate", "operand " + p.type.str() + " does not match " + p0.type.str() +
                              " outside dimension " + std::to_string(dim));
    rt.dims[dim] += p.dims()[dim];
  }
  return impl_->emit("concatenate", parts, {}, "dimension = " + std::to_string(dim) + " : i64",
                     {rt})[0];
}

Value Builder::pad(Value a, Value pad_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  const size_t r = static_cast<size_t>(a.rank());
  if (pad_value.rank() != 0 || pad_value.elem() != a.elem())
    fail("pad", "padding value must be rank-0 " + std::string(mlir_name(a.elem())) + ", got " +
                    pad_value.type.str());
  if (low.size() != r || high.size() != r || interior.size() != r)
    fail("pad", "low/high/interior must each have " + std::to_string(r) + " entries");
  TensorType rt{a.elem(), {}};
  for (size_t i = 0; i < r; ++i) {
    const int64_t d = a.dims()[i];
    if (interior[i] < 0) fail("pad", "negative interior padding " + dims_str(interior));
    const int64_t n = low[i] + high[i] + d + (d > 0 ? (d - 1) * interior[i] : 0);
    if (n < 0) fail("pad", "negative result size padding " + a.type.str());
    rt.dims.push_back(n);
  }
  std::string attrs = "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " +
                      i64_array(high) + ", interior_padding = " + i64_array(interior);
  return impl_->emit("pad", {a, pad_value}, {}, attrs, {rt})[0];
}

Value Builder::reverse(Value a, const std::vector<int64_t>& dims) {
  check_dim_list("reverse", dims, a.rank(), "dimensions");
  return impl_->emit("reverse", {a}, {}, "dimensions = " + i64_array(dims), {a.type})[0];
}

}  // namespace tpu::hlo

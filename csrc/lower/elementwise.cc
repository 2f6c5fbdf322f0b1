// Elementwise lowerings: arithmetic, comparisons, unary math, where/clamp,
// fill/copy. Arithmetic runs in opmath(result type) and PyTorch's dtype
// promotion decides the result type.
#include <c10/util/Exception.h>

#include <cmath>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

c10::ScalarType common(const Ctx& c, std::vector<size_t> args) { return result_type(c, args); }

// The value of argument i (tensor or runtime scalar) as type t.
Value operand(Ctx& c, size_t i, ElemType t) {
  const Arg& a = c.arg(i);
  if (a.kind == Arg::kScalar) return c.scalar(i, t);
  return cast(c.b, a.tensor, t);
}

// Binary arithmetic: computes in opmath(result type) after broadcasting.
using BinFn = std::function<Value(hlo::Builder&, Value, Value, ElemType)>;

// `divides`: an integer divisor of zero fails a device-side check (as the CPU raises).
LowerFn binary(BinFn fn, bool with_alpha = false, bool int_to_float = false, bool divides = false) {
  return [fn, with_alpha, int_to_float, divides](Ctx& c) -> std::vector<Value> {
    c10::ScalarType rt = common(c, {0, 1});
    if (int_to_float && !c10::isFloatingType(rt) && !c10::isComplexType(rt))
      rt = c10::typeMetaToScalarType(c10::get_default_dtype());
    ElemType t = opmath(to_elem(rt));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    if (with_alpha && c.arg(2).kind == Arg::kScalar) {
      Value alpha = bcast(c.b, c.scalar(2, t), y.dims());
      y = t == ElemType::PRED ? c.b.binary("and", y, alpha) : c.b.mul(y, alpha);
    }
    if (divides) c.check_divisor(y);
    return {fn(c.b, x, y, t)};
  };
}

Value add_fn(hlo::Builder& b, Value x, Value y, ElemType t) {
  return t == ElemType::PRED ? b.binary("or", x, y) : b.add(x, y);
}
Value sub_fn(hlo::Builder& b, Value x, Value y, ElemType) { return b.sub(x, y); }
Value mul_fn(hlo::Builder& b, Value x, Value y, ElemType t) {
  return t == ElemType::PRED ? b.binary("and", x, y) : b.mul(x, y);
}
Value div_fn(hlo::Builder& b, Value x, Value y, ElemType) { return b.div(x, y); }

// Floor division with Python semantics for integers and floats.
Value floor_div(hlo::Builder& b, Value x, Value y, ElemType t) {
  if (hlo::is_float(t)) return b.unary("floor", b.div(x, y));
  Value q = b.div(x, y);  // truncates toward zero
  Value r = b.binary("remainder", x, y);
  Value zero = zeros_like(b, x);
  Value adjust = b.binary("and", b.compare(r, zero, Cmp::NE),
                          b.compare(b.compare(r, zero, Cmp::LT), b.compare(y, zero, Cmp::LT), Cmp::NE));
  return b.select(adjust, b.sub(q, scalar_like(b, 1, q)), q);
}

Value trunc_div(hlo::Builder& b, Value x, Value y, ElemType t) {
  if (!hlo::is_float(t)) return b.div(x, y);
  Value q = b.div(x, y);
  Value zero = zeros_like(b, q);
  return b.select(b.compare(q, zero, Cmp::LT), b.unary("ceil", q), b.unary("floor", q));
}

LowerFn div_mode() {
  return [](Ctx& c) -> std::vector<Value> {
    std::string mode = c.is_none(2) ? "" : c.str_arg(2);
    c10::ScalarType rt = common(c, {0, 1});
    if (mode.empty() && !c10::isFloatingType(rt) && !c10::isComplexType(rt))
      rt = c10::typeMetaToScalarType(c10::get_default_dtype());
    ElemType t = opmath(to_elem(rt));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    ElemType storage = to_elem(rt);
    if (hlo::is_float(t) && storage != t && mode == "trunc") {
      // PyTorch rounds a float16/bfloat16 quotient to its dtype before
      // truncating it (12.97 -> 13 -> 13); floor division stays in float32.
      Value q = c.b.convert(c.b.convert(c.b.div(x, y), storage), t);
      return {trunc_div(c.b, q, scalar_like(c.b, 1, q), t)};
    }
    if (!mode.empty()) c.check_divisor(y);
    if (mode == "floor") return {floor_div(c.b, x, y, t)};
    if (mode == "trunc") return {trunc_div(c.b, x, y, t)};
    return {c.b.div(x, y)};
  };
}

// Python-style remainder (sign of the divisor).
Value remainder_fn(hlo::Builder& b, Value x, Value y, ElemType t) {
  Value r = b.binary("remainder", x, y);
  Value zero = zeros_like(b, r);
  Value fix = b.binary("and", b.compare(r, zero, Cmp::NE),
                       b.compare(b.compare(r, zero, Cmp::LT), b.compare(y, zero, Cmp::LT), Cmp::NE));
  return b.select(fix, b.add(r, y), r);
}

LowerFn compare(Cmp dir) {
  return [dir](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(common(c, {0, 1}));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    return {c.b.compare(x, y, dir)};
  };
}

LowerFn logical(const char* op) {
  std::string name = op;
  return [name](Ctx& c) -> std::vector<Value> {
    auto [x, y] = align(c.b, operand(c, 0, ElemType::PRED), operand(c, 1, ElemType::PRED),
                        ElemType::PRED);
    return {c.b.binary(name, x, y)};
  };
}

LowerFn bitwise(const char* op) {
  std::string name = op;
  return [name](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(common(c, {0, 1}));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    return {c.b.binary(name, x, y)};
  };
}

// Unary float math: integer inputs promote to the default float dtype.
LowerFn unary_float(std::function<Value(hlo::Builder&, Value)> fn) {
  return [fn](Ctx& c) -> std::vector<Value> {
    c10::ScalarType st = c.dtype(0);
    if (!c10::isFloatingType(st) && !c10::isComplexType(st))
      st = c10::typeMetaToScalarType(c10::get_default_dtype());
    return {fn(c.b, cast(c.b, c.tensor(0), opmath(to_elem(st))))};
  };
}

LowerFn unary_float_op(const char* op) {
  std::string name = op;
  return unary_float([name](hlo::Builder& b, Value x) { return b.unary(name, x); });
}

// Unary ops that keep the input's dtype.
LowerFn unary_same(std::function<Value(hlo::Builder&, Value)> fn) {
  return [fn](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(c.dtype(0));
    Value x = cast(c.b, c.tensor(0), opmath(t));
    return {fn(c.b, x)};
  };
}

Value relu_fn(hlo::Builder& b, Value x) {
  if (x.elem() == ElemType::PRED) return x;
  return b.max(x, zeros_like(b, x));
}

}  // namespace

// PyTorch's sub_check: subtraction refuses bool tensors (its CPU kernels raise;
// found by tests/fuzz: `3 - mask` returned numbers on tpu).
LowerFn no_bool_sub(LowerFn fn) {
  return [fn](Ctx& c) -> std::vector<Value> {
    for (size_t i = 0; i < 2 && i < c.num_args(); ++i)
      TORCH_CHECK(c.arg(i).kind != Arg::kTensor || c.dtype(i) != c10::ScalarType::Bool,
                  "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                  "trying to invert a mask, use the `~` or `logical_not()` operator instead.");
    return fn(c);
  };
}

void register_elementwise() {
  add("add.Tensor", binary(add_fn, true));
  add("add.Scalar", binary(add_fn, true));
  add("sub.Tensor", no_bool_sub(binary(sub_fn, true)));
  add("sub.Scalar", no_bool_sub(binary(sub_fn, true)));
  add("rsub.Tensor", no_bool_sub([](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(common(c, {0, 1})));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    Value alpha = bcast(c.b, c.scalar(2, t), x.dims());
    return {c.b.sub(y, c.b.mul(x, alpha))};
  }));
  add("rsub.Scalar", no_bool_sub([](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(common(c, {0, 1})));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    Value alpha = bcast(c.b, c.scalar(2, t), x.dims());
    return {c.b.sub(y, c.b.mul(x, alpha))};
  }));
  add("mul.Tensor", binary(mul_fn));
  add("mul.Scalar", binary(mul_fn));
  add("div.Tensor", binary(div_fn, false, true));
  add("div.Scalar", binary(div_fn, false, true));
  add("div.Tensor_mode", div_mode());
  add("div.Scalar_mode", div_mode());
  add("remainder.Tensor", binary(remainder_fn, false, false, true));
  add("remainder.Scalar", binary(remainder_fn, false, false, true));
  add("fmod.Tensor", binary([](hlo::Builder& b, Value x, Value y, ElemType) {
        return b.binary("remainder", x, y);
      }, false, false, true));
  add("fmod.Scalar", binary([](hlo::Builder& b, Value x, Value y, ElemType) {
        return b.binary("remainder", x, y);
      }, false, false, true));
  add("maximum", binary([](hlo::Builder& b, Value x, Value y, ElemType) { return b.max(x, y); }));
  add("minimum", binary([](hlo::Builder& b, Value x, Value y, ElemType) { return b.min(x, y); }));
  add("pow.Tensor_Tensor", binary([](hlo::Builder& b, Value x, Value y, ElemType) {
        return b.binary("power", x, y);
      }));
  add("pow.Tensor_Scalar", binary([](hlo::Builder& b, Value x, Value y, ElemType) {
        return b.binary("power", x, y);
      }));
  add("pow.Scalar", binary([](hlo::Builder& b, Value x, Value y, ElemType) {
        return b.binary("power", x, y);
      }));
  add("atan2", binary([](hlo::Builder& b, Value x, Value y, ElemType) { return b.binary("atan2", x, y); },
                      false, true));

  add("eq.Tensor", compare(Cmp::EQ));
  add("eq.Scalar", compare(Cmp::EQ));
  add("ne.Tensor", compare(Cmp::NE));
  add("ne.Scalar", compare(Cmp::NE));
  add("lt.Tensor", compare(Cmp::LT));
  add("lt.Scalar", compare(Cmp::LT));
  add("le.Tensor", compare(Cmp::LE));
  add("le.Scalar", compare(Cmp::LE));
  add("gt.Tensor", compare(Cmp::GT));
  add("gt.Scalar", compare(Cmp::GT));
  add("ge.Tensor", compare(Cmp::GE));
  add("ge.Scalar", compare(Cmp::GE));
  add("logical_and", logical("and"));
  add("logical_or", logical("or"));
  add("logical_xor", logical("xor"));
  add("logical_not", [](Ctx& c) -> std::vector<Value> {
    return {c.b.unary("not", cast(c.b, c.tensor(0), ElemType::PRED))};
  });
  add("bitwise_and.Tensor", bitwise("and"));
  add("bitwise_or.Tensor", bitwise("or"));
  add("bitwise_xor.Tensor", bitwise("xor"));
  add("bitwise_not", [](Ctx& c) -> std::vector<Value> { return {c.b.unary("not", c.tensor(0))}; });

  add("neg", unary_same([](hlo::Builder& b, Value x) { return b.neg(x); }));
  // The physical conjugate; copy_ uses it to resolve PyTorch's lazy conj bit.
  add("conj_physical", unary_same([](hlo::Builder& b, Value x) {
        if (!hlo::is_complex(x.elem())) return x;
        return b.generic("complex", {b.unary("real", x), b.neg(b.unary("imag", x))}, "", x.type);
      }));
  add("abs", unary_same([](hlo::Builder& b, Value x) {
        return x.elem() == ElemType::PRED ? x : b.unary("abs", x);
      }));
  add("sign", unary_same([](hlo::Builder& b, Value x) {
        return x.elem() == ElemType::PRED ? x : b.unary("sign", x);
      }));
  // sgn is sign for real dtypes (abs' derivative).
  add("sgn", unary_same([](hlo::Builder& b, Value x) {
        return x.elem() == ElemType::PRED ? x : b.unary("sign", x);
      }));
  add("relu", unary_same(relu_fn));
  add("floor", unary_same([](hlo::Builder& b, Value x) {
        return hlo::is_float(x.elem()) ? b.unary("floor", x) : x;
      }));
  add("ceil", unary_same([](hlo::Builder& b, Value x) {
        return hlo::is_float(x.elem()) ? b.unary("ceil", x) : x;
      }));
  add("round", unary_same([](hlo::Builder& b, Value x) {
        return hlo::is_float(x.elem()) ? b.unary("round_nearest_even", x) : x;
      }));
  add("trunc", unary_same([](hlo::Builder& b, Value x) {
        if (!hlo::is_float(x.elem())) return x;
        return b.select(b.compare(x, zeros_like(b, x), Cmp::LT), b.unary("ceil", x), b.unary("floor", x));
      }));
  add("exp", unary_float_op("exponential"));
  add("expm1", unary_float_op("exponential_minus_one"));
  add("log", unary_float_op("log"));
  add("log1p", unary_float_op("log_plus_one"));
  add("log2", unary_float([](hlo::Builder& b, Value x) {
        return b.div(b.unary("log", x), scalar_like(b, std::log(2.0), x));
      }));
  add("log10", unary_float([](hlo::Builder& b, Value x) {
        return b.div(b.unary("log", x), scalar_like(b, std::log(10.0), x));
      }));
  add("sqrt", unary_float_op("sqrt"));
  add("rsqrt", unary_float_op("rsqrt"));
  add("sin", unary_float_op("sine"));
  add("cos", unary_float_op("cosine"));
  add("tan", unary_float_op("tan"));
  add("tanh", unary_float_op("tanh"));
  add("sigmoid", unary_float_op("logistic"));
  add("reciprocal", unary_float([](hlo::Builder& b, Value x) { return b.div(scalar_like(b, 1, x), x); }));
  add("square", unary_same([](hlo::Builder& b, Value x) { return b.mul(x, x); }));

  add("threshold_backward", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(common(c, {0, 1})));
    auto [g, x] = align(c.b, c.tensor(0), c.tensor(1), t);
    Value th = bcast(c.b, c.scalar(2, t), x.dims());
    return {c.b.select(c.b.compare(x, th, Cmp::LE), zeros_like(c.b, g), g)};
  });
  add("sigmoid_backward", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(c.dtype(0)));
    auto [g, y] = align(c.b, c.tensor(0), c.tensor(1), t);
    return {c.b.mul(g, c.b.mul(y, c.b.sub(scalar_like(c.b, 1, y), y)))};
  });
  add("tanh_backward", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(c.dtype(0)));
    auto [g, y] = align(c.b, c.tensor(0), c.tensor(1), t);
    return {c.b.mul(g, c.b.sub(scalar_like(c.b, 1, y), c.b.mul(y, y)))};
  });

  add("where.self", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(common(c, {1, 2}));
    Value cond = cast(c.b, c.tensor(0), ElemType::PRED);
    auto dims = hlo::broadcast_shapes(cond.dims(), hlo::broadcast_shapes(c.tensor(1).dims(), c.tensor(2).dims()));
    return {c.b.select(bcast(c.b, cond, dims), bcast(c.b, cast(c.b, c.tensor(1), t), dims),
                       bcast(c.b, cast(c.b, c.tensor(2), t), dims))};
  });
  add("clamp", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(common(c, {0, 1, 2}));
    Value x = cast(c.b, c.tensor(0), t);
    if (!c.is_none(1)) x = c.b.max(x, bcast(c.b, c.scalar(1, t), x.dims()));
    if (!c.is_none(2)) x = c.b.min(x, bcast(c.b, c.scalar(2, t), x.dims()));
    return {x};
  });
  add("clamp.Tensor", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(common(c, {0, 1, 2}));
    Value x = cast(c.b, c.tensor(0), t);
    for (size_t i : {1, 2}) {
      if (c.is_none(i)) continue;
      auto [a, bound] = align(c.b, x, c.tensor(i), t);
      x = i == 1 ? c.b.max(a, bound) : c.b.min(a, bound);
    }
    return {x};
  });
  add("addcmul", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(common(c, {0, 1, 2})));
    auto dims = hlo::broadcast_shapes(c.tensor(0).dims(), hlo::broadcast_shapes(c.tensor(1).dims(), c.tensor(2).dims()));
    Value x = bcast(c.b, cast(c.b, c.tensor(0), t), dims);
    Value p = c.b.mul(bcast(c.b, cast(c.b, c.tensor(1), t), dims), bcast(c.b, cast(c.b, c.tensor(2), t), dims));
    return {c.b.add(x, c.b.mul(bcast(c.b, c.scalar(3, t), dims), p))};
  });
  add("addcdiv", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(common(c, {0, 1, 2})));
    auto dims = hlo::broadcast_shapes(c.tensor(0).dims(), hlo::broadcast_shapes(c.tensor(1).dims(), c.tensor(2).dims()));
    Value x = bcast(c.b, cast(c.b, c.tensor(0), t), dims);
    Value q = c.b.div(bcast(c.b, cast(c.b, c.tensor(1), t), dims), bcast(c.b, cast(c.b, c.tensor(2), t), dims));
    return {c.b.add(x, c.b.mul(bcast(c.b, c.scalar(3, t), dims), q))};
  });
  add("lerp.Scalar", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(c.dtype(0)));
    auto [x, y] = align(c.b, c.tensor(0), c.tensor(1), t);
    Value w = bcast(c.b, c.scalar(2, t), x.dims());
    // PyTorch's two-sided formula keeps lerp exact at both ends.
    Value diff = c.b.sub(y, x);
    Value lo = c.b.add(x, c.b.mul(w, diff));
    Value hi = c.b.sub(y, c.b.mul(diff, c.b.sub(scalar_like(c.b, 1, w), w)));
    return {c.b.select(c.b.compare(c.b.unary("abs", w), scalar_like(c.b, 0.5, w), Cmp::LT), lo, hi)};
  });

  add("fill.Scalar", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = to_elem(c.dtype(0));
    return {bcast(c.b, c.scalar(1, t), self.dims())};
  });
  scalars_as_self("fill.Scalar");
  add("fill.Tensor", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = to_elem(c.dtype(0));
    return {bcast(c.b, cast(c.b, c.b.reshape(c.tensor(1), {}), t), self.dims())};
  });
  add("zero", [](Ctx& c) -> std::vector<Value> { return {zeros_like(c.b, c.tensor(0))}; });
  add("copy", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(c.dtype(0));
    return {bcast(c.b, cast(c.b, c.tensor(1), t), c.tensor(0).dims())};
  });
  add("clone", [](Ctx& c) -> std::vector<Value> { return {c.tensor(0)}; });
}

}  // namespace tpu::lower

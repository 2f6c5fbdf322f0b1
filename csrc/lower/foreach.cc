// _foreach_* ops: one program applies the op to every tensor of the list
// (Strict Eager runs a whole optimizer update per foreach call).
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using Bin = std::function<Value(hlo::Builder&, Value, Value)>;

Value op_add(hlo::Builder& b, Value x, Value y) { return b.add(x, y); }
Value op_sub(hlo::Builder& b, Value x, Value y) { return b.sub(x, y); }
Value op_mul(hlo::Builder& b, Value x, Value y) { return b.mul(x, y); }
Value op_div(hlo::Builder& b, Value x, Value y) { return b.div(x, y); }
Value op_max(hlo::Builder& b, Value x, Value y) { return b.max(x, y); }
Value op_min(hlo::Builder& b, Value x, Value y) { return b.min(x, y); }
Value op_pow(hlo::Builder& b, Value x, Value y) { return b.binary("power", x, y); }

enum class Other { kList, kScalar, kScalarList, kTensor };

// The i-th scalar of scalar-list argument `arg`, converted to t. Ctx::scalar_list
// converts the whole list; called once per tensor it emitted N converts per
// tensor, N^2 per foreach op: AdamW's bias corrections on the UNet's 86
// parameters put 15,000 dead converts into each training program (two thirds of
// its StableHLO), which XLA then had to parse and delete at every compile.
Value list_scalar(Ctx& c, size_t arg, size_t i, ElemType t) {
  const Arg& a = c.arg(arg);
  TORCH_CHECK(a.kind == Arg::kScalarList && i < a.scalars.size(), "argument ", arg,
              " is not a scalar list of at least ", i + 1, " scalars");
  return c.b.convert(a.scalars[i], t);
}

// self[i] (op) other[i], other being a list, one scalar, a scalar list or a
// single (possibly CPU scalar) tensor; `alpha` (arg 2) scales other when present.
LowerFn binary(Bin fn, Other kind, bool alpha) {
  return [fn, kind, alpha](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    std::vector<Value> ys = kind == Other::kList ? c.tensors(1) : std::vector<Value>{};
    for (size_t i = 0; i < xs.size(); ++i) {
      ElemType t = opmath(to_elem(dts[i]));
      Value x = cast(c.b, xs[i], t);
      Value y;
      switch (kind) {
        case Other::kList: y = cast(c.b, ys[i], t); break;
        case Other::kScalar: y = c.scalar(1, t); break;
        case Other::kScalarList: y = list_scalar(c, 1, i, t); break;
        case Other::kTensor: y = cast(c.b, c.b.reshape(c.tensor(1), {}), t); break;
      }
      y = bcast(c.b, y, x.dims());
      if (alpha && c.num_args() > 2 && c.arg(2).kind == Arg::kScalar)
        y = c.b.mul(y, bcast(c.b, c.scalar(2, t), x.dims()));
      out.push_back(fn(c.b, x, y));
    }
    return out;
  };
}

LowerFn unary(std::function<Value(hlo::Builder&, Value)> fn) {
  return [fn](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    for (size_t i = 0; i < xs.size(); ++i) out.push_back(fn(c.b, cast(c.b, xs[i], opmath(to_elem(dts[i])))));
    return out;
  };
}

// addcmul / addcdiv: self + value * (t1 op t2), value a scalar, scalar list or tensor.
LowerFn pointwise(Bin fn, Other kind) {
  return [fn, kind](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0), t1 = c.tensors(1), t2 = c.tensors(2);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    for (size_t i = 0; i < xs.size(); ++i) {
      ElemType t = opmath(to_elem(dts[i]));
      Value x = cast(c.b, xs[i], t);
      Value v;
      if (kind == Other::kScalar) v = c.scalar(3, t);
      else if (kind == Other::kScalarList) v = list_scalar(c, 3, i, t);
      else v = cast(c.b, c.b.reshape(c.b.slice(c.b.reshape(c.tensor(3), {c.tensor(3).type.numel()}),
                                               {static_cast<int64_t>(i)}, {static_cast<int64_t>(i) + 1}, {1}), {}), t);
      Value p = fn(c.b, cast(c.b, t1[i], t), cast(c.b, t2[i], t));
      out.push_back(c.b.add(x, c.b.mul(bcast(c.b, v, x.dims()), p)));
    }
    return out;
  };
}

void family(const std::string& name, Bin fn, bool alpha) {
  add("_foreach_" + name + ".List", binary(fn, Other::kList, alpha));
  add("_foreach_" + name + ".Scalar", binary(fn, Other::kScalar, false));
  add("_foreach_" + name + ".ScalarList", binary(fn, Other::kScalarList, false));
  add("_foreach_" + name + ".Tensor", binary(fn, Other::kTensor, alpha));
}

}  // namespace

void register_foreach() {
  family("add", op_add, true);
  family("sub", op_sub, true);
  family("mul", op_mul, false);
  family("div", op_div, false);
  family("maximum", op_max, false);
  family("minimum", op_min, false);
  add("_foreach_clamp_min.Scalar", binary(op_max, Other::kScalar, false));
  add("_foreach_clamp_max.Scalar", binary(op_min, Other::kScalar, false));
  add("_foreach_pow.List", binary(op_pow, Other::kList, false));
  add("_foreach_pow.Scalar", binary(op_pow, Other::kScalar, false));
  add("_foreach_addcmul.Scalar", pointwise(op_mul, Other::kScalar));
  add("_foreach_addcmul.ScalarList", pointwise(op_mul, Other::kScalarList));
  add("_foreach_addcmul.Tensor", pointwise(op_mul, Other::kTensor));
  add("_foreach_addcdiv.Scalar", pointwise(op_div, Other::kScalar));
  add("_foreach_addcdiv.ScalarList", pointwise(op_div, Other::kScalarList));
  add("_foreach_addcdiv.Tensor", pointwise(op_div, Other::kTensor));
  // lerp(self, end, weight) with PyTorch's two-sided formula.
  auto lerp = [](hlo::Builder& b, Value x, Value y, Value w) {
    Value diff = b.sub(y, x);
    Value lo = b.add(x, b.mul(w, diff));
    Value hi = b.sub(y, b.mul(diff, b.sub(scalar_like(b, 1, w), w)));
    return b.select(b.compare(b.unary("abs", w), scalar_like(b, 0.5, w), hlo::Cmp::LT), lo, hi);
  };
  add("_foreach_lerp.Scalar", [lerp](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0), ys = c.tensors(1);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    for (size_t i = 0; i < xs.size(); ++i) {
      ElemType t = opmath(to_elem(dts[i]));
      Value x = cast(c.b, xs[i], t), y = cast(c.b, ys[i], t);
      out.push_back(lerp(c.b, x, y, bcast(c.b, c.scalar(2, t), x.dims())));
    }
    return out;
  });
  add("_foreach_lerp.List", [lerp](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0), ys = c.tensors(1), ws = c.tensors(2);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    for (size_t i = 0; i < xs.size(); ++i) {
      ElemType t = opmath(to_elem(dts[i]));
      out.push_back(lerp(c.b, cast(c.b, xs[i], t), cast(c.b, ys[i], t), cast(c.b, ws[i], t)));
    }
    return out;
  });
  add("_foreach_sqrt", unary([](hlo::Builder& b, Value x) { return b.unary("sqrt", x); }));
  add("_foreach_neg", unary([](hlo::Builder& b, Value x) { return b.neg(x); }));
  add("_foreach_abs", unary([](hlo::Builder& b, Value x) { return b.unary("abs", x); }));
  add("_foreach_exp", unary([](hlo::Builder& b, Value x) { return b.unary("exponential", x); }));
  add("_foreach_reciprocal", unary([](hlo::Builder& b, Value x) { return b.div(scalar_like(b, 1, x), x); }));
  add("_foreach_zero", unary([](hlo::Builder& b, Value x) { return zeros_like(b, x); }));
  add("_foreach_copy", [](Ctx& c) -> std::vector<Value> {
    auto xs = c.tensors(0), src = c.tensors(1);
    const auto& dts = c.arg(0).dtypes;
    std::vector<Value> out;
    for (size_t i = 0; i < xs.size(); ++i) out.push_back(bcast(c.b, cast(c.b, src[i], to_elem(dts[i])), xs[i].dims()));
    return out;
  });
}

}  // namespace tpu::lower

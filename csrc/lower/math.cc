// More elementwise math: inverse and hyperbolic trigonometry, special
// functions, exp2/frac, logaddexp(2), copysign, fmax/fmin, floor_divide,
// heaviside, hypot, xlogy, nextafter, nan_to_num, signbit, shifts, sinc,
// lerp.Tensor, threshold, hard/softshrink.
//
// Functions without a StableHLO op use CHLO (asin, sinh, lgamma ...), which
// XLA expands into its own accurate approximations on every platform.
// Float functions promote integer inputs to the default dtype and compute in
// opmath, as elementwise.cc does.
#include <cmath>
#include <limits>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

c10::ScalarType float_result(c10::ScalarType t) {
  if (!c10::isFloatingType(t) && !c10::isComplexType(t))
    return c10::typeMetaToScalarType(c10::get_default_dtype());
  return t;
}

LowerFn unary(std::function<Value(hlo::Builder&, Value)> fn) {
  return [fn](Ctx& c) -> std::vector<Value> {
    return {fn(c.b, cast(c.b, c.tensor(0), opmath(to_elem(float_result(c.dtype(0))))))};
  };
}

LowerFn chlo(const std::string& op) {
  return unary([op](hlo::Builder& b, Value x) { return b.generic("chlo." + op, {x}, "", x.type); });
}

Value operand(Ctx& c, size_t i, ElemType t) {
  if (c.arg(i).kind == Arg::kScalar) return c.scalar(i, t);
  return cast(c.b, c.tensor(i), t);
}

// Binary op over PyTorch's promoted type (`to_float`: integer results become
// the default float dtype), computed in opmath.
// `divides`: an integer divisor of zero fails a device-side check (as the CPU raises).
LowerFn binary(std::function<Value(hlo::Builder&, Value, Value)> fn, bool to_float,
               bool divides = false) {
  return [fn, to_float, divides](Ctx& c) -> std::vector<Value> {
    c10::ScalarType rt = result_type(c, {0, 1});
    if (to_float) rt = float_result(rt);
    ElemType t = opmath(to_elem(rt));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    if (divides) c.check_divisor(y);
    return {fn(c.b, x, y)};
  };
}

Value isnan(hlo::Builder& b, Value x) { return b.compare(x, x, Cmp::NE); }

Value inf_like(hlo::Builder& b, Value x, double sign = 1) {
  return scalar_like(b, sign * std::numeric_limits<double>::infinity(), x);
}

// The sign bit of a float, as PRED.
Value sign_bit(hlo::Builder& b, Value x) {
  ElemType it = x.elem() == ElemType::F64 ? ElemType::S64 : ElemType::S32;
  if (x.elem() != ElemType::F64) x = b.convert(x, ElemType::F32);
  Value bits = b.bitcast_convert(x, {it, x.dims()});
  return b.compare(bits, b.splat_i(0, bits.type), Cmp::LT);
}

// max(x, y) + log1p(base^-(|x - y|)) / log(base); equal infinities give x.
Value logaddexp(hlo::Builder& b, Value x, Value y, double base) {
  Value m = b.max(x, y);
  Value d = b.unary("abs", b.sub(x, y));
  Value ln = scalar_like(b, std::log(base), d);
  Value r = b.add(m, b.div(b.unary("log_plus_one", b.unary("exponential", b.neg(b.mul(d, ln)))), ln));
  Value same_inf = b.binary("and", b.compare(x, y, Cmp::EQ),
                            b.compare(b.unary("abs", x), inf_like(b, x), Cmp::EQ));
  return b.select(same_inf, x, r);
}

// PyTorch's floor division of floats: from fmod, so the quotient is exact
// when representable (a / b rounding can cross an integer boundary).
Value floor_divide(hlo::Builder& b, Value x, Value y) {
  if (!hlo::is_float(x.elem())) {
    Value q = b.div(x, y), r = b.binary("remainder", x, y), zero = zeros_like(b, x);
    Value adjust = b.binary("and", b.compare(r, zero, Cmp::NE),
                            b.compare(b.compare(r, zero, Cmp::LT), b.compare(y, zero, Cmp::LT), Cmp::NE));
    return b.select(adjust, b.sub(q, scalar_like(b, 1, q)), q);
  }
  Value zero = zeros_like(b, x);
  Value mod = b.binary("remainder", x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value fix = b.binary("and", b.compare(mod, zero, Cmp::NE),
                       b.compare(b.compare(y, zero, Cmp::LT), b.compare(mod, zero, Cmp::LT), Cmp::NE));
  div = b.select(fix, b.sub(div, scalar_like(b, 1, div)), div);
  Value fl = b.unary("floor", div);
  fl = b.select(b.compare(b.sub(div, fl), scalar_like(b, 0.5, div), Cmp::GT), b.add(fl, scalar_like(b, 1, fl)), fl);
  // A zero quotient keeps the sign of the true quotient (-0.0 for -x / y).
  Value q = b.div(x, y);
  Value signed_zero = b.mul(zero, q);
  fl = b.select(b.compare(div, zero, Cmp::EQ), signed_zero, fl);
  return b.select(b.compare(y, zero, Cmp::EQ), q, fl);
}

double finfo_max(ElemType t) {
  switch (t) {
    case ElemType::F16: return 65504.0;
    case ElemType::BF16: return 3.3895313892515355e38;
    case ElemType::F32: return std::numeric_limits<float>::max();
    default: return std::numeric_limits<double>::max();
  }
}

// nan_to_num(self, nan?, posinf?, neginf?): None means 0 / the dtype's max / lowest.
std::vector<Value> nan_to_num(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = c.tensor(0);
  if (!hlo::is_float(x.elem())) return {x};
  ElemType st = x.elem(), t = opmath(st);
  Value xf = cast(b, x, t);
  auto pick = [&](size_t i, double dflt) {
    return c.is_none(i) ? scalar_like(b, dflt, xf) : bcast(b, c.scalar(i, t), xf.dims());
  };
  Value r = b.select(isnan(b, xf), pick(1, 0), xf);
  r = b.select(b.compare(xf, inf_like(b, xf), Cmp::EQ), pick(2, finfo_max(st)), r);
  r = b.select(b.compare(xf, inf_like(b, xf, -1), Cmp::EQ), pick(3, -finfo_max(st)), r);
  return {r};
}

// Shifts: PyTorch gives 0 (or -1 for negative signed right shifts) when the
// shift is negative or at least the bit width.
LowerFn shift(bool left) {
  return [left](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    hlo::Builder& b = c.b;
    std::string op = left ? "shift_left"
                          : (hlo::is_signed_int(t) ? "shift_right_arithmetic" : "shift_right_logical");
    Value r = b.binary(op, x, y);
    Value zero = zeros_like(b, y);
    Value out_of_range = b.compare(y, scalar_like(b, hlo::bit_width(t), y), Cmp::GE);
    if (hlo::is_signed_int(t)) out_of_range = b.binary("or", out_of_range, b.compare(y, zero, Cmp::LT));
    Value over = zeros_like(b, x);
    if (!left && hlo::is_signed_int(t))
      over = b.select(b.compare(x, zeros_like(b, x), Cmp::LT), scalar_like(b, -1, x), over);
    return {b.select(out_of_range, over, r)};
  };
}

// PyTorch (like SciPy) defines digamma(0) = -inf; chlo.digamma gives NaN there.
Value digamma(hlo::Builder& b, Value x) {
  Value d = b.generic("chlo.digamma", {x}, "", x.type);
  return b.select(b.compare(x, zeros_like(b, x), Cmp::EQ), inf_like(b, x, -1), d);
}

// pi^(n+1) * P_n(cot(pi x)), where d^n/dy^n cot(y) = P_n(cot y): the term of
// the reflection formula psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi^(n+1) P_n(cot pi x)
// (the n-th derivative of psi(1 - x) - psi(x) = pi cot(pi x)). The polynomials
// follow from P_0(c) = c and P_{k+1}(c) = -(1 + c^2) P_k'(c); computed in f64.
Value reflection_term(hlo::Builder& b, Value x, int64_t n) {
  std::vector<double> p = {0, 1};  // coefficients of P_0, lowest power first
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> d(p.size() > 1 ? p.size() - 1 : 1, 0.0);
    for (size_t i = 1; i < p.size(); ++i) d[i - 1] = static_cast<double>(i) * p[i];
    std::vector<double> next(d.size() + 2, 0.0);
    for (size_t i = 0; i < d.size(); ++i) {
      next[i] -= d[i];
      next[i + 2] -= d[i];
    }
    p = std::move(next);
  }
  Value px = b.mul(x, scalar_like(b, M_PI, x));
  Value cot = b.div(b.unary("cosine", px), b.unary("sine", px));
  Value acc = scalar_like(b, p.back(), x);
  for (size_t i = p.size() - 1; i-- > 0;) acc = b.add(b.mul(acc, cot), scalar_like(b, p[i], x));
  return b.mul(acc, scalar_like(b, std::pow(M_PI, static_cast<double>(n + 1)), x));
}

}  // namespace

void register_math() {
  for (const char* op : {"asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc",
                         "lgamma"})
    add(op, chlo(op));
  add("digamma", unary(digamma));
  add("erfinv", chlo("erf_inv"));
  // polygamma(int n, Tensor self): digamma's derivative asks for it (n = 1).
  add("polygamma", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(1), opmath(to_elem(float_result(c.dtype(1)))));
    const int64_t n = c.int_arg(0);
    // digamma handles every x.
    if (n == 0) return {digamma(b, x)};
    // chlo.polygamma is only accurate for x > 0: negative x goes through the
    // reflection formula, evaluated where it is accurate (at 1 - x > 1).
    auto psi = [&](Value v) {
      return b.generic("chlo.polygamma", {scalar_like(b, static_cast<double>(n), v), v}, "", v.type);
    };
    Value zero = zeros_like(b, x);
    Value neg = b.compare(x, zero, Cmp::LT);
    Value pos_x = b.select(neg, b.sub(scalar_like(b, 1, x), x), x);
    Value at_pos = psi(pos_x);
    Value mirrored = (n % 2 == 0) ? at_pos : b.neg(at_pos);
    Value refl = cast(b, reflection_term(b, cast(b, x, ElemType::F64), n), x.elem());
    Value out = b.select(neg, b.sub(mirrored, refl), at_pos);
    // The pole at 0, approached from above: (-1)^(n+1) n! / x^(n+1).
    Value inf = scalar_like(b, n % 2 ? std::numeric_limits<double>::infinity()
                                     : -std::numeric_limits<double>::infinity(), x);
    return {b.select(b.compare(x, zero, Cmp::EQ), inf, out)};
  });
  add("exp2", unary([](hlo::Builder& b, Value x) { return b.binary("power", scalar_like(b, 2, x), x); }));
  add("frac", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(0), opmath(to_elem(c.dtype(0))));
    Value tr = b.select(b.compare(x, zeros_like(b, x), Cmp::LT), b.unary("ceil", x), b.unary("floor", x));
    return {b.sub(x, tr)};
  });
  add("signbit", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    if (hlo::is_float(x.elem())) return {sign_bit(c.b, x)};
    if (hlo::is_signed_int(x.elem())) return {c.b.compare(x, zeros_like(c.b, x), Cmp::LT)};
    return {c.b.splat_i(0, {ElemType::PRED, x.dims()})};
  });
  add("logaddexp", binary([](hlo::Builder& b, Value x, Value y) { return logaddexp(b, x, y, M_E); }, true));
  add("logaddexp2", binary([](hlo::Builder& b, Value x, Value y) { return logaddexp(b, x, y, 2); }, true));
  auto copysign = [](hlo::Builder& b, Value x, Value y) {
    Value a = b.unary("abs", x);
    return b.select(sign_bit(b, y), b.neg(a), a);
  };
  add("copysign.Tensor", binary(copysign, true));
  add("copysign.Scalar", binary(copysign, true));
  auto fmax = [](hlo::Builder& b, Value x, Value y) {
    if (!hlo::is_float(x.elem())) return b.max(x, y);
    return b.select(isnan(b, x), y, b.select(isnan(b, y), x, b.max(x, y)));
  };
  auto fmin = [](hlo::Builder& b, Value x, Value y) {
    if (!hlo::is_float(x.elem())) return b.min(x, y);
    return b.select(isnan(b, x), y, b.select(isnan(b, y), x, b.min(x, y)));
  };
  add("fmax", binary(fmax, false));
  add("fmin", binary(fmin, false));
  add("floor_divide", binary(floor_divide, false, true));
  add("floor_divide.Scalar", binary(floor_divide, false, true));
  add("heaviside", binary([](hlo::Builder& b, Value x, Value v) {
        Value zero = zeros_like(b, x);
        Value pos = b.select(b.compare(x, zero, Cmp::GT), scalar_like(b, 1, x), zero);
        return b.select(b.compare(x, zero, Cmp::EQ), v, pos);  // NaN > 0 is false: 0
      }, false));
  add("hypot", binary([](hlo::Builder& b, Value x, Value y) {
        // Scaled by the larger magnitude so squares cannot overflow.
        Value ax = b.unary("abs", x), ay = b.unary("abs", y);
        Value m = b.max(ax, ay), n = b.min(ax, ay);
        Value zero = zeros_like(b, m);
        Value safe = b.select(b.compare(m, zero, Cmp::EQ), scalar_like(b, 1, m), m);
        Value q = b.div(n, safe);
        Value r = b.mul(m, b.unary("sqrt", b.add(scalar_like(b, 1, q), b.mul(q, q))));
        Value inf = b.binary("or", b.compare(ax, inf_like(b, ax), Cmp::EQ), b.compare(ay, inf_like(b, ay), Cmp::EQ));
        return b.select(inf, inf_like(b, r), r);
      }, true));
  auto xlogy = [](hlo::Builder& b, Value x, Value y) {
    Value r = b.mul(x, b.unary("log", y));
    r = b.select(b.compare(x, zeros_like(b, x), Cmp::EQ), zeros_like(b, r), r);
    return b.select(isnan(b, y), y, r);
  };
  add("xlogy.Tensor", binary(xlogy, true));
  add("xlogy.Scalar_Self", binary(xlogy, true));
  add("xlogy.Scalar_Other", binary(xlogy, true));
  // nextafter works on the storage type: in opmath the next float32 would
  // round back to the input for float16/bfloat16.
  add("nextafter", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    auto [x, y] = align(c.b, operand(c, 0, t), operand(c, 1, t), t);
    return {c.b.generic("chlo.next_after", {x, y}, "", x.type)};
  });
  add("nan_to_num", nan_to_num);
  add("sinc", unary([](hlo::Builder& b, Value x) {
        Value px = b.mul(x, scalar_like(b, M_PI, x));
        Value r = b.div(b.unary("sine", px), px);
        return b.select(b.compare(x, zeros_like(b, x), Cmp::EQ), scalar_like(b, 1, x), r);
      }));
  // lerp.Tensor(self, end, weight) with PyTorch's two-sided formula.
  add("lerp.Tensor", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = opmath(to_elem(c.dtype(0)));
    auto dims = hlo::broadcast_shapes(c.tensor(0).dims(), hlo::broadcast_shapes(c.tensor(1).dims(), c.tensor(2).dims()));
    Value x = bcast(b, cast(b, c.tensor(0), t), dims), y = bcast(b, cast(b, c.tensor(1), t), dims);
    Value w = bcast(b, cast(b, c.tensor(2), t), dims);
    Value diff = b.sub(y, x);
    Value lo = b.add(x, b.mul(w, diff));
    Value hi = b.sub(y, b.mul(diff, b.sub(scalar_like(b, 1, w), w)));
    return {b.select(b.compare(b.unary("abs", w), scalar_like(b, 0.5, w), Cmp::LT), lo, hi)};
  });
  // threshold(self, threshold, value): x <= threshold -> value.
  add("threshold", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(c.dtype(0));
    Value x = c.tensor(0);
    Value th = bcast(c.b, c.scalar(1, t), x.dims()), v = bcast(c.b, c.scalar(2, t), x.dims());
    return {c.b.select(c.b.compare(x, th, Cmp::LE), v, x)};
  });
  // hardshrink / softshrink(self, lambd) and their backwards (grad, self, lambd).
  add("hardshrink", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    Value l = bcast(c.b, c.scalar(1, x.elem()), x.dims());
    Value inside = c.b.compare(c.b.unary("abs", x), l, Cmp::LE);
    return {c.b.select(inside, zeros_like(c.b, x), x)};
  });
  add("softshrink", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(0), opmath(to_elem(c.dtype(0))));
    Value l = bcast(b, c.scalar(1, x.elem()), x.dims());
    Value r = b.select(b.compare(x, l, Cmp::GT), b.sub(x, l),
                       b.select(b.compare(x, b.neg(l), Cmp::LT), b.add(x, l), zeros_like(b, x)));
    return {b.select(isnan(b, x), x, r)};
  });
  for (const char* name : {"hardshrink_backward", "softshrink_backward"}) {
    add(name, [](Ctx& c) -> std::vector<Value> {
      ElemType t = opmath(to_elem(c.dtype(0)));
      auto [g, x] = align(c.b, c.tensor(0), c.tensor(1), t);
      Value l = bcast(c.b, c.scalar(2, t), x.dims());
      Value inside = c.b.compare(c.b.unary("abs", x), l, Cmp::LE);
      return {c.b.select(inside, zeros_like(c.b, g), g)};
    });
  }
  add("bitwise_left_shift.Tensor", shift(true));
  add("bitwise_right_shift.Tensor", shift(false));
  add("__lshift__.Tensor", shift(true));
  add("__rshift__.Tensor", shift(false));
  // Shifts by a Python number (packed int4 unpacking: `q >> 4`, `q << 4`).
  add("bitwise_left_shift.Tensor_Scalar", shift(true));
  add("bitwise_right_shift.Tensor_Scalar", shift(false));
  add("__lshift__.Scalar", shift(true));
  add("__rshift__.Scalar", shift(false));
}

}  // namespace tpu::lower

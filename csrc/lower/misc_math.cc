// Assorted math ops with no better family: aminmax, isin, linalg_cross, frexp
// and the modified Bessel functions i0 / i0e / i1 / i1e.
#include <climits>
#include <cmath>
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// aminmax(self, *, dim?, keepdim) -> (min, max). A slice holding NaN gives NaN
// for both, as PyTorch does; XLA's CPU minimum/maximum may drop NaN (fast
// min/max), so NaN is detected separately. Bool reduces as u8.
std::vector<Value> aminmax(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = c.tensor(0);
  if (x.elem() == ElemType::PRED) x = b.convert(x, ElemType::U8);
  if (x.rank() == 0) return {x, x};
  bool keepdim = c.bool_arg(2);
  std::vector<int64_t> dims =
      c.is_none(1) ? iota_dims(0, x.rank()) : std::vector<int64_t>{wrap_dim(c.int_arg(1), x.rank())};
  Value lo = reduce_min(b, x, dims, keepdim), hi = reduce_max(b, x, dims, keepdim);
  if (hlo::is_float(x.elem())) {
    Value nan = b.compare(x, x, Cmp::NE);
    Value any = b.reduce(nan, b.constant_i(0, ElemType::PRED), dims, hlo::ReduceOp::Or);
    if (keepdim) any = b.reshape(any, lo.dims());
    Value q = b.splat_f(std::numeric_limits<double>::quiet_NaN(), lo.type);
    lo = b.select(any, q, lo);
    hi = b.select(any, q, hi);
  }
  return {fit_meta(c, 0, lo), fit_meta(c, 1, hi)};
}

// Membership of each element in a flat list of test values: [E] x [T] compare,
// any over T. The comparison runs in the promoted type, as PyTorch's does.
Value isin_flat(hlo::Builder& b, Value elems, Value tests, ElemType t, bool invert) {
  std::vector<int64_t> shape = elems.dims();
  int64_t n = elems.type.numel(), m = tests.type.numel();
  Value e = b.reshape(cast(b, elems, t), {n});
  Value v = b.reshape(cast(b, tests, t), {m});
  Value hit;
  if (m == 0) {
    hit = b.splat_i(0, {ElemType::PRED, {n}});
  } else {
    Value eq = b.compare(b.broadcast_in_dim(e, {n, m}, {0}), b.broadcast_in_dim(v, {n, m}, {1}), Cmp::EQ);
    hit = b.reduce(eq, b.constant_i(0, ElemType::PRED), {1}, hlo::ReduceOp::Or);
  }
  if (invert) hit = b.unary("not", hit);
  return b.reshape(hit, shape);
}

// linalg_cross(self, other, *, dim): the components of both operands along
// `dim` (size 3, after broadcasting), combined as the usual determinant terms.
std::vector<Value> cross(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = to_elem(c.out_dtype(0));
  const std::vector<int64_t>& shape = c.out_meta()[0].sizes;
  Value x = bcast(b, cast(b, c.tensor(0), t), shape), y = bcast(b, cast(b, c.tensor(1), t), shape);
  int64_t dim = wrap_dim(c.int_arg(2), static_cast<int64_t>(shape.size()));
  TORCH_CHECK(shape[dim] == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ",
              shape[dim]);
  auto part = [&](Value v, int64_t k) {
    std::vector<int64_t> start(shape.size(), 0), lim = shape, step(shape.size(), 1);
    start[dim] = k;
    lim[dim] = k + 1;
    return b.slice(v, start, lim, step);
  };
  Value x0 = part(x, 0), x1 = part(x, 1), x2 = part(x, 2);
  Value y0 = part(y, 0), y1 = part(y, 1), y2 = part(y, 2);
  Value r0 = b.sub(b.mul(x1, y2), b.mul(x2, y1));
  Value r1 = b.sub(b.mul(x2, y0), b.mul(x0, y2));
  Value r2 = b.sub(b.mul(x0, y1), b.mul(x1, y0));
  return {b.concatenate({r0, r1, r2}, dim)};
}

// frexp(self) -> (mantissa in [0.5, 1) with self's sign, int32 exponent), read
// off the IEEE bits with integer arithmetic only: XLA's CPU backend flushes
// subnormal floats to zero, so no float op may touch the input. A subnormal's
// fraction is normalised by its leading-zero count. Zero, inf and NaN keep
// their value with exponent 0 (as std::frexp gives).
std::vector<Value> frexp(Ctx& c) {
  hlo::Builder& b = c.b;
  Value self = c.tensor(0);
  TORCH_CHECK(hlo::is_float(self.elem()), "torch.frexp() only supports floating-point dtypes");
  bool wide = self.elem() == ElemType::F64;
  ElemType ft = wide ? ElemType::F64 : ElemType::F32, it = wide ? ElemType::S64 : ElemType::S32;
  int nbits = wide ? 64 : 32, mant_bits = wide ? 52 : 23;
  int64_t exp_mask = wide ? 0x7FF : 0xFF, half_bias = wide ? 1022 : 126;
  hlo::TensorType itype{it, self.dims()};
  auto k = [&](int64_t v) { return b.splat_i(v, itype); };
  Value bits;
  if (self.elem() == ElemType::BF16) {
    // bf16 is the top half of an f32: widen the bits, not the value.
    Value h = b.convert(b.bitcast_convert(self, {ElemType::S16, self.dims()}), it);
    bits = b.binary("shift_left", h, k(16));
  } else {
    bits = b.bitcast_convert(cast(b, self, ft), itype);
  }
  int64_t frac_mask = (int64_t{1} << mant_bits) - 1;
  Value field = b.binary("and", b.binary("shift_right_logical", bits, k(mant_bits)), k(exp_mask));
  Value frac = b.binary("and", bits, k(frac_mask));
  Value sign = b.binary("and", bits, k(wide ? std::numeric_limits<int64_t>::min() : INT32_MIN));
  Value zero_field = b.compare(field, k(0), Cmp::EQ);
  Value special = b.binary("or", b.compare(field, k(exp_mask), Cmp::EQ),
                           b.binary("and", zero_field, b.compare(frac, k(0), Cmp::EQ)));
  // Normal: e = field - 126; subnormal: the leading fraction bit at position
  // p = (nbits - 1) - clz gives e = p - (bias + mant_bits - 1) + 1 - 1, and the
  // fraction shifts up so that bit becomes the implicit one.
  Value clz = b.unary("count_leading_zeros", frac);
  Value p = b.sub(k(nbits - 1), clz);
  Value e_sub = b.sub(p, k(half_bias + mant_bits - 1));
  Value frac_sub = b.binary("and", b.binary("shift_left", frac, b.sub(k(mant_bits), p)), k(frac_mask));
  Value e = b.select(zero_field, e_sub, b.sub(field, k(half_bias)));
  Value f = b.select(zero_field, frac_sub, frac);
  Value mbits = b.binary("or", b.binary("or", sign, f), k(half_bias << mant_bits));
  Value m = cast(b, b.bitcast_convert(mbits, {ft, self.dims()}), self.elem());
  m = b.select(special, self, m);
  e = b.select(special, k(0), e);
  return {m, cast(b, e, ElemType::S32)};
}

// Modified Bessel functions of the first kind, orders 0 and 1. For |x| <= 30
// the power series sum_k (x^2/4)^k / (k! (k+nu)!) (all terms positive, so no
// cancellation) in Horner form; beyond, the asymptotic expansion
// e^|x| / sqrt(2 pi |x|) * sum_k c_k / |x|^k, whose terms at |x| > 30 fall
// below double precision well before k = 20.
constexpr double kSeriesLimit = 30.0;
constexpr int kSeriesTerms = 50;
constexpr int kAsymTerms = 20;

Value bessel_series(hlo::Builder& b, Value ax, int nu) {
  Value y = b.mul(b.mul(ax, ax), scalar_like(b, 0.25, ax));
  Value one = scalar_like(b, 1, ax);
  Value s = one;
  for (int k = kSeriesTerms; k >= 1; --k)
    s = b.add(one, b.mul(s, b.mul(y, scalar_like(b, 1.0 / (double(k) * double(k + nu)), ax))));
  if (nu == 1) s = b.mul(s, b.mul(ax, scalar_like(b, 0.5, ax)));
  return s;
}

// sum_k c_k z^k with z = 1/|x|, c_k = (-1)^k prod_{j<=k} (4 nu^2 - (2j-1)^2) / (k! 8^k).
Value bessel_asym_poly(hlo::Builder& b, Value ax, int nu) {
  std::vector<double> coef(kAsymTerms + 1);
  coef[0] = 1;
  for (int k = 1; k <= kAsymTerms; ++k)
    coef[k] = -coef[k - 1] * (4.0 * nu * nu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k);
  Value z = b.div(scalar_like(b, 1, ax), ax);
  Value p = scalar_like(b, coef[kAsymTerms], ax);
  for (int k = kAsymTerms - 1; k >= 0; --k) p = b.add(scalar_like(b, coef[k], ax), b.mul(p, z));
  return b.div(p, b.unary("sqrt", b.mul(ax, scalar_like(b, 2 * M_PI, ax))));
}

// I_nu(x) (scaled: e^-|x| I_nu(x)) for nu in {0, 1}; I_1 is odd, I_0 even.
LowerFn bessel(int nu, bool scaled) {
  return [nu, scaled](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = float_opmath(c.out_dtype(0));
    Value x = cast(b, c.tensor(0), t);
    Value ax = b.unary("abs", x);
    Value small = b.compare(ax, scalar_like(b, kSeriesLimit, ax), Cmp::LE);
    // Keep each branch's argument in its own range so the unused one stays finite.
    Value as = b.min(ax, scalar_like(b, kSeriesLimit, ax));
    Value al = b.max(ax, scalar_like(b, kSeriesLimit, ax));
    Value ser = bessel_series(b, as, nu);
    Value asym = bessel_asym_poly(b, al, nu);
    Value r;
    if (scaled) {
      ser = b.mul(ser, b.unary("exponential", b.neg(as)));
      r = b.select(small, ser, asym);
    } else {
      // As PyTorch computes it: exp(|x|) overflows to inf a little before
      // I_nu does, and |x| = inf gives inf * 0 = NaN.
      r = b.select(small, ser, b.mul(b.unary("exponential", al), asym));
    }
    r = b.select(b.compare(ax, ax, Cmp::NE), ax, r);  // NaN in, NaN out
    if (nu == 1) r = b.mul(r, b.unary("sign", x));
    return {r};
  };
}

}  // namespace

void register_misc_math() {
  add("aminmax", aminmax);
  // isin(elements, test_elements, *, assume_unique, invert) and its scalar forms.
  add("isin.Tensor_Tensor", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {isin_flat(c.b, c.tensor(0), c.tensor(1), t, c.bool_arg(3))};
  });
  add("isin.Tensor_Scalar", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {isin_flat(c.b, c.tensor(0), c.scalar(1, t), t, c.bool_arg(3))};
  });
  add("isin.Scalar_Tensor", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {isin_flat(c.b, c.scalar(0, t), c.tensor(1), t, c.bool_arg(3))};
  });
  add("linalg_cross", cross);
  add("frexp.Tensor", frexp);
  add("i0", bessel(0, false));
  add("special_i0e", bessel(0, true));
  add("special_i1", bessel(1, false));
  add("special_i1e", bessel(1, true));
}

}  // namespace tpu::lower

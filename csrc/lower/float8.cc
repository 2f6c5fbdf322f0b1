// float32 -> float8 with PyTorch's rules (hlo::Float8Format), as integer ops on
// the float32 bits. XLA's convert rounds the same way inside the range but
// overflows e4m3fn to NaN where PyTorch saturates; computing the bits here
// makes every cast bit-identical to PyTorch's CPU cast on every platform
// (hlo::float8_bits is the same rule on the host, for constants).
#include "lower/helpers.h"

namespace tpu::lower {

Value float8_from_f32(hlo::Builder& b, Value f32, ElemType t) {
  const hlo::Float8Format fmt = hlo::float8_format(t);
  const int m = fmt.mant_bits;
  const auto& dims = f32.dims();
  auto k = [&](int64_t v) { return b.splat_i(v, hlo::TensorType{ElemType::S32, dims}); };
  using hlo::Cmp;

  Value u = b.bitcast_convert(f32, {ElemType::S32, dims});
  Value a = b.binary("and", u, k(0x7fffffff));  // |x|'s bits
  Value sign = b.binary("shift_left", b.binary("shift_right_logical", u, k(31)), k(7));
  Value e = b.binary("shift_right_logical", a, k(23));

  // Normal in the float8 type: rebias the exponent and round the dropped
  // mantissa bits to nearest even. Below the range this goes negative; the
  // subnormal branch is taken there.
  Value odd = b.binary("and", b.binary("shift_right_logical", a, k(23 - m)), k(1));
  Value biased = b.add(b.add(a, k(-(int64_t{127 - fmt.bias} << 23) + ((int64_t{1} << (22 - m)) - 1))), odd);
  Value r_normal = b.binary("shift_right_arithmetic", biased, k(23 - m));

  // Subnormal: the significand in units of the smallest subnormal, shifted
  // right by s with round-to-nearest-even (s capped where everything rounds to 0).
  Value is_f32_sub = b.compare(e, k(0), Cmp::EQ);
  Value full = b.select(is_f32_sub, a, b.binary("or", b.binary("and", a, k(0x7fffff)), k(0x800000)));
  Value e_eff = b.max(e, k(1));
  Value s = b.min(b.sub(k(151 - fmt.bias - m), e_eff), k(30));
  Value q = b.binary("shift_right_logical", full, s);
  Value half = b.binary("shift_left", k(1), b.sub(s, k(1)));
  Value rem = b.binary("and", full, b.sub(b.binary("shift_left", k(1), s), k(1)));
  Value up = b.binary("or", b.compare(rem, half, Cmp::GT),
                      b.binary("and", b.compare(rem, half, Cmp::EQ),
                               b.compare(b.binary("and", q, k(1)), k(1), Cmp::EQ)));
  Value r_sub = b.add(q, b.convert(up, ElemType::S32));

  Value r = b.select(b.compare(e, k(128 - fmt.bias), Cmp::GE), r_normal, r_sub);

  Value is_nan = b.compare(a, k(0x7f800000), Cmp::GT);
  Value overflow = b.binary("or", b.compare(a, k(0x7f800000), Cmp::GE), b.compare(r, k(fmt.max_code), Cmp::GT));
  Value out = b.binary("or", r, sign);
  switch (fmt.overflow) {
    case hlo::Float8Format::kSaturate:
      out = b.select(overflow, b.binary("or", k(fmt.max_code), sign), out);
      break;
    case hlo::Float8Format::kInf:
      out = b.select(overflow, b.binary("or", k(fmt.max_code + 1), sign), out);
      break;
    case hlo::Float8Format::kNaN:
      out = b.select(overflow, k(0x80), out);
      break;
  }
  if (fmt.fnuz) {
    out = b.select(b.compare(r, k(0), Cmp::EQ), k(0), out);  // no -0
    out = b.select(is_nan, k(0x80), out);
  } else {
    out = b.select(is_nan, b.binary("or", k(0x7f), sign), out);
  }
  return b.bitcast_convert(b.convert(out, ElemType::U8), {t, dims});
}

Value cast_result(hlo::Builder& b, Value v, ElemType t) {
  if (hlo::is_float8(t) || hlo::is_float8(v.elem())) return cast(b, v, t);
  return b.convert(v, t);
}

}  // namespace tpu::lower

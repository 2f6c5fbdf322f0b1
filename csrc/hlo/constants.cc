// Constants and iota: printing element values so MLIR reads back exactly the
// bits we mean.
//
// A decimal is printed only when it parses to the intended bits whichever way
// the parser rounds (straight to the target type, or through double first): the
// value is first rounded to the target type, and a decimal is accepted only if
// it reads back as that value's exact double, which lies so close to a value of
// the target type that no rounding path can pick a neighbour. Anything else --
// inf, nan, -0 -- prints as the hex bit pattern, which MLIR takes verbatim.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hlo/builder_impl.h"

namespace tpu::hlo {
namespace {

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Rounds `d` to nearest-even in an IEEE binary format with `eb` exponent and
// `mb` mantissa bits, returning its bit pattern. Done directly from the double
// (not via float) so bf16/f16 never suffer double rounding.
uint64_t round_to_format(double d, int eb, int mb) {
  const uint64_t sign = std::signbit(d) ? uint64_t{1} << (eb + mb) : 0;
  const uint64_t exp_mask = ((uint64_t{1} << eb) - 1) << mb;
  if (std::isnan(d)) return sign | exp_mask | (uint64_t{1} << (mb - 1));  // quiet nan
  if (std::isinf(d)) return sign | exp_mask;
  const double a = std::fabs(d);
  if (a == 0) return sign;
  const int bias = (1 << (eb - 1)) - 1;
  const int emin = 1 - bias;
  int e;
  std::frexp(a, &e);
  int E = e - 1;  // a = 1.xxx * 2^E
  if (E < emin) {
    // Subnormal: count in units of the smallest subnormal. A carry to 2^mb lands
    // exactly on the smallest normal's encoding, so no special case is needed.
    double q = std::nearbyint(std::ldexp(a, mb - emin));
    return sign | static_cast<uint64_t>(q);
  }
  double q = std::nearbyint(std::ldexp(a, mb - E));  // in [2^mb, 2^(mb+1)]
  if (q >= std::ldexp(1.0, mb + 1)) {
    q = std::ldexp(q, -1);
    ++E;
  }
  if (E > bias) return sign | exp_mask;  // overflow rounds to inf
  const uint64_t mant = static_cast<uint64_t>(q) - (uint64_t{1} << mb);
  return sign | (static_cast<uint64_t>(E + bias) << mb) | mant;
}

// Value of a finite bit pattern of the given format, as an exact double.
double format_value(uint64_t bits, int eb, int mb) {
  const bool neg = (bits >> (eb + mb)) & 1;
  const int bias = (1 << (eb - 1)) - 1;
  const int ef = static_cast<int>((bits >> mb) & ((uint64_t{1} << eb) - 1));
  const uint64_t mant = bits & ((uint64_t{1} << mb) - 1);
  double v = ef == 0 ? std::ldexp(static_cast<double>(mant), 1 - bias - mb)
                     : std::ldexp(static_cast<double>(mant | (uint64_t{1} << mb)), ef - bias - mb);
  return neg ? -v : v;
}

// MLIR float literals need a '.' (a bare "1e+10" would lex as an integer).
std::string with_point(std::string s) {
  if (s.find('.') != std::string::npos) return s;
  size_t e = s.find_first_of("eE");
  if (e == std::string::npos) return s + ".0";
  return s.substr(0, e) + ".0" + s.substr(e);
}

std::string hex(uint64_t bits, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "0x%0*llX", digits, static_cast<unsigned long long>(bits));
  return buf;
}

std::string real_literal(double f, ElemType t) {
  char buf[64];
  if (t == ElemType::F64) {
    if (!std::isfinite(f) || (f == 0 && std::signbit(f))) return hex(double_bits(f), 16);
    if (std::fabs(f) < 1e15 && std::trunc(f) == f) {
      std::snprintf(buf, sizeof buf, "%.0f.0", f);
      return buf;
    }
    for (int p = 1; p <= 17; ++p) {
      std::snprintf(buf, sizeof buf, "%.*g", p, f);
      if (double_bits(std::strtod(buf, nullptr)) == double_bits(f)) return with_point(buf);
    }
    return hex(double_bits(f), 16);
  }
  if (is_float8(t)) return hex(float8_bits(static_cast<float>(f), t), 2);
  int eb = 8, mb = 23;
  if (t == ElemType::F16) eb = 5, mb = 10;
  if (t == ElemType::BF16) eb = 8, mb = 7;
  const uint64_t bits = round_to_format(f, eb, mb);
  const int digits = (1 + eb + mb) / 4;
  const uint64_t exp_mask = ((uint64_t{1} << eb) - 1) << mb;
  const bool neg_zero = bits == uint64_t{1} << (eb + mb);
  if ((bits & exp_mask) == exp_mask || neg_zero) return hex(bits, digits);
  const double v = format_value(bits, eb, mb);  // exact
  // Integral values read best (and exactly) as "100.0" rather than "1.0e+02".
  if (std::fabs(v) < 1e15 && std::trunc(v) == v) {
    std::snprintf(buf, sizeof buf, "%.0f.0", v);
    return buf;
  }
  if (t == ElemType::F32) {
    // Short form if it reads back right both straight to f32 and through double.
    for (int p = 1; p <= 9; ++p) {
      std::snprintf(buf, sizeof buf, "%.*g", p, v);
      if (std::strtof(buf, nullptr) == static_cast<float>(v) &&
          round_to_format(std::strtod(buf, nullptr), 8, 23) == bits)
        return with_point(buf);
    }
    return hex(bits, digits);
  }
  // f16/bf16: a decimal that reads back as the value's exact double.
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) return with_point(buf);
  }
  return hex(bits, digits);
}

bool all_same(const std::vector<std::string>& v) {
  for (const auto& s : v)
    if (s != v[0]) return false;
  return true;
}

// Nested "[[a, b], [c, d]]" text of row-major elements with shape `dims`.
void nest(const std::vector<std::string>& el, const std::vector<int64_t>& dims, size_t axis,
          size_t& pos, std::string& out) {
  if (axis == dims.size()) {
    out += el[pos++];
    return;
  }
  out += '[';
  for (int64_t i = 0; i < dims[axis]; ++i) {
    if (i) out += ", ";
    nest(el, dims, axis + 1, pos, out);
  }
  out += ']';
}

}  // namespace

std::string float_literal(double f, ElemType t) {
  if (t == ElemType::C64) return "(" + real_literal(f, ElemType::F32) + ", 0.0)";
  if (t == ElemType::C128) return "(" + real_literal(f, ElemType::F64) + ", 0.0)";
  if (is_float(t)) return real_literal(f, t);
  // Integer types accept a float only when it is exactly an integer in range, so
  // a lowering that passes 2.5 for an int tensor fails loudly instead of truncating.
  if (t == ElemType::PRED) return f != 0 ? "true" : "false";
  const int w = bit_width(t);
  const double lo = is_unsigned_int(t) ? 0.0 : -std::ldexp(1.0, w - 1);
  const double hi = is_unsigned_int(t) ? std::ldexp(1.0, w) : std::ldexp(1.0, w - 1);
  if (!(std::trunc(f) == f && f >= lo && f < hi))
    fail("constant", "value " + std::to_string(f) + " is not representable in " + mlir_name(t));
  if (is_unsigned_int(t)) return std::to_string(static_cast<uint64_t>(f));
  return std::to_string(static_cast<int64_t>(f));
}

std::string int_literal(int64_t i, ElemType t) {
  if (t == ElemType::PRED) return i != 0 ? "true" : "false";
  if (is_float(t) || is_complex(t)) return float_literal(static_cast<double>(i), t);
  // Out-of-range integers wrap to the type's width (two's complement), the way a
  // C cast or torch's dtype conversion does; MLIR would reject them otherwise.
  const int w = bit_width(t);
  uint64_t u = static_cast<uint64_t>(i);
  if (w < 64) u &= (uint64_t{1} << w) - 1;
  if (is_unsigned_int(t)) return std::to_string(u);
  if (w < 64 && (u >> (w - 1)) & 1) u |= ~((uint64_t{1} << w) - 1);  // sign-extend
  return std::to_string(static_cast<int64_t>(u));
}

// Attribute text of a constant holding `el` (one string = a splat).
static std::string constant_attr(const std::vector<std::string>& el, const TensorType& t) {
  for (int64_t d : t.dims)
    if (d < 0) fail("constant", "type " + t.str() + " has a negative dimension");
  std::string body;
  if (t.numel() == 0) {
    body = "";  // an empty tensor has no elements to print
  } else if (all_same(el)) {
    body = el[0];
  } else {
    size_t pos = 0;
    nest(el, t.dims, 0, pos, body);
  }
  return "value = dense<" + body + "> : " + t.str();
}

Value Builder::constant_f(double f, ElemType t) { return splat_f(f, TensorType{t, {}}); }
Value Builder::constant_i(int64_t i, ElemType t) { return splat_i(i, TensorType{t, {}}); }

Value Builder::splat_f(double f, const TensorType& t) {
  return impl_->emit("constant", {}, {}, constant_attr({float_literal(f, t.elem)}, t), {t})[0];
}
Value Builder::splat_i(int64_t i, const TensorType& t) {
  return impl_->emit("constant", {}, {}, constant_attr({int_literal(i, t.elem)}, t), {t})[0];
}

Value Builder::dense_i(const std::vector<int64_t>& values, const TensorType& t) {
  if (static_cast<int64_t>(values.size()) != t.numel())
    fail("constant", std::to_string(values.size()) + " values for " + t.str());
  std::vector<std::string> el;
  for (int64_t v : values) el.push_back(int_literal(v, t.elem));
  if (el.empty()) el.push_back("");
  return impl_->emit("constant", {}, {}, constant_attr(el, t), {t})[0];
}

Value Builder::dense_f(const std::vector<double>& values, const TensorType& t) {
  if (static_cast<int64_t>(values.size()) != t.numel())
    fail("constant", std::to_string(values.size()) + " values for " + t.str());
  std::vector<std::string> el;
  for (double v : values) el.push_back(float_literal(v, t.elem));
  if (el.empty()) el.push_back("");
  return impl_->emit("constant", {}, {}, constant_attr(el, t), {t})[0];
}

Value Builder::iota(const TensorType& t, int64_t dim) {
  if (t.rank() == 0) fail("iota", "result must have rank >= 1");
  if (dim < 0 || dim >= t.rank())
    fail("iota", "iota_dimension " + std::to_string(dim) + " out of range for " + t.str());
  if (t.elem == ElemType::PRED) fail("iota", "element type i1 is not allowed");
  return impl_->emit("iota", {}, {}, "iota_dimension = " + std::to_string(dim) + " : i64", {t})[0];
}

}  // namespace tpu::hlo

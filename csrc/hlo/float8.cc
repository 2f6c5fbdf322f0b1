// float8 formats and PyTorch's float32 -> float8 rounding, on the host (for
// constants). The same rule, as StableHLO integer ops, is in csrc/lower/float8.cc.
#include <cstring>
#include <stdexcept>

#include "hlo/builder.h"

namespace tpu::hlo {

Float8Format float8_format(ElemType t) {
  switch (t) {
    case ElemType::F8E4M3FN: return {3, 7, false, 0x7e, Float8Format::kSaturate};
    case ElemType::F8E5M2: return {2, 15, false, 0x7b, Float8Format::kInf};
    case ElemType::F8E4M3FNUZ: return {3, 8, true, 0x7f, Float8Format::kNaN};
    case ElemType::F8E5M2FNUZ: return {2, 16, true, 0x7f, Float8Format::kNaN};
    default: break;
  }
  throw std::invalid_argument(std::string("float8_format: ") + mlir_name(t) + " is not a float8 type");
}

uint8_t float8_bits(float f, ElemType t) {
  const Float8Format fmt = float8_format(t);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 31) << 7;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return fmt.fnuz ? 0x80 : static_cast<uint8_t>(0x7f | sign);
  const int m = fmt.mant_bits;
  const uint32_t e = a >> 23;
  uint32_t r;
  if (e >= static_cast<uint32_t>(128 - fmt.bias)) {
    // Normal: rebias the exponent, round the dropped mantissa bits to nearest even.
    uint64_t w = uint64_t{a} - (uint64_t{127 - static_cast<uint32_t>(fmt.bias)} << 23) +
                 ((uint64_t{1} << (22 - m)) - 1) + ((a >> (23 - m)) & 1);
    r = static_cast<uint32_t>(w >> (23 - m));
  } else {
    // Subnormal: the significand in units of the smallest subnormal, rounded to nearest even.
    const uint32_t full = e ? ((a & 0x7fffffu) | 0x800000u) : a;
    const int e_eff = e ? static_cast<int>(e) : 1;
    int s = 151 - fmt.bias - m - e_eff;
    if (s > 30) s = 30;
    const uint32_t q = full >> s, rem = full & ((uint32_t{1} << s) - 1), half = uint32_t{1} << (s - 1);
    r = q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
  }
  if (a >= 0x7f800000u || r > fmt.max_code) {
    switch (fmt.overflow) {
      case Float8Format::kSaturate: return static_cast<uint8_t>(fmt.max_code | sign);
      case Float8Format::kInf: return static_cast<uint8_t>((fmt.max_code + 1) | sign);
      case Float8Format::kNaN: return 0x80;
    }
  }
  if (fmt.fnuz && r == 0) return 0;
  return static_cast<uint8_t>(r | sign);
}

}  // namespace tpu::hlo

// Element types and tensor types: their MLIR spelling and classification.
#include <stdexcept>

#include "hlo/builder.h"

namespace tpu::hlo {

const char* mlir_name(ElemType t) {
  switch (t) {
    case ElemType::PRED: return "i1";
    case ElemType::S8: return "i8";
    case ElemType::S16: return "i16";
    case ElemType::S32: return "i32";
    case ElemType::S64: return "i64";
    // MLIR's plain iN is signless; StableHLO reads signless as signed, so unsigned
    // types must carry the explicit "ui" spelling.
    case ElemType::U8: return "ui8";
    case ElemType::U16: return "ui16";
    case ElemType::U32: return "ui32";
    case ElemType::U64: return "ui64";
    case ElemType::F16: return "f16";
    case ElemType::BF16: return "bf16";
    case ElemType::F32: return "f32";
    case ElemType::F64: return "f64";
    case ElemType::C64: return "complex<f32>";
    case ElemType::C128: return "complex<f64>";
    case ElemType::F8E4M3FN: return "f8E4M3FN";
    case ElemType::F8E5M2: return "f8E5M2";
    case ElemType::F8E4M3FNUZ: return "f8E4M3FNUZ";
    case ElemType::F8E5M2FNUZ: return "f8E5M2FNUZ";
  }
  return "?";
}

bool is_float(ElemType t) {
  return t == ElemType::F16 || t == ElemType::BF16 || t == ElemType::F32 || t == ElemType::F64 ||
         is_float8(t);
}
bool is_float8(ElemType t) {
  return t == ElemType::F8E4M3FN || t == ElemType::F8E5M2 || t == ElemType::F8E4M3FNUZ ||
         t == ElemType::F8E5M2FNUZ;
}
bool is_complex(ElemType t) { return t == ElemType::C64 || t == ElemType::C128; }
bool is_signed_int(ElemType t) {
  return t == ElemType::S8 || t == ElemType::S16 || t == ElemType::S32 || t == ElemType::S64;
}
bool is_unsigned_int(ElemType t) {
  return t == ElemType::U8 || t == ElemType::U16 || t == ElemType::U32 || t == ElemType::U64;
}

int bit_width(ElemType t) {
  switch (t) {
    case ElemType::PRED: return 1;
    case ElemType::S8: case ElemType::U8: return 8;
    case ElemType::F8E4M3FN: case ElemType::F8E5M2: case ElemType::F8E4M3FNUZ:
    case ElemType::F8E5M2FNUZ: return 8;
    case ElemType::S16: case ElemType::U16: case ElemType::F16: case ElemType::BF16: return 16;
    case ElemType::S32: case ElemType::U32: case ElemType::F32: return 32;
    case ElemType::S64: case ElemType::U64: case ElemType::F64: case ElemType::C64: return 64;
    case ElemType::C128: return 128;
  }
  return 0;
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) {
    s += std::to_string(d);
    s += 'x';
  }
  s += mlir_name(elem);
  s += '>';
  return s;
}

}  // namespace tpu::hlo

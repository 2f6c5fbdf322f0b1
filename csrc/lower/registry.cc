#include "lower/registry.h"

#include <c10/util/Exception.h>

#include "lower/helpers.h"

namespace tpu::lower {

using hlo::ElemType;

hlo::ElemType to_elem(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return ElemType::PRED;
    case c10::ScalarType::Char: return ElemType::S8;
    case c10::ScalarType::Short: return ElemType::S16;
    case c10::ScalarType::Int: return ElemType::S32;
    case c10::ScalarType::Long: return ElemType::S64;
    case c10::ScalarType::Byte: return ElemType::U8;
    case c10::ScalarType::UInt16: return ElemType::U16;
    case c10::ScalarType::UInt32: return ElemType::U32;
    case c10::ScalarType::UInt64: return ElemType::U64;
    case c10::ScalarType::Half: return ElemType::F16;
    case c10::ScalarType::BFloat16: return ElemType::BF16;
    case c10::ScalarType::Float: return ElemType::F32;
    case c10::ScalarType::Double: return ElemType::F64;
    case c10::ScalarType::ComplexFloat: return ElemType::C64;
    case c10::ScalarType::ComplexDouble: return ElemType::C128;
    case c10::ScalarType::Float8_e4m3fn: return ElemType::F8E4M3FN;
    case c10::ScalarType::Float8_e5m2: return ElemType::F8E5M2;
    case c10::ScalarType::Float8_e4m3fnuz: return ElemType::F8E4M3FNUZ;
    case c10::ScalarType::Float8_e5m2fnuz: return ElemType::F8E5M2FNUZ;
    default: break;
  }
  TORCH_CHECK_TYPE(false, "the tpu device does not support dtype ", t,
                   "; supported: bool, uint8/16/32/64, int8/16/32/64, float16, bfloat16, "
                   "float32, float64, complex64, complex128, float8_e4m3fn/e5m2/e4m3fnuz/e5m2fnuz");
}

c10::ScalarType to_scalar_type(hlo::ElemType t) {
  switch (t) {
    case ElemType::PRED: return c10::ScalarType::Bool;
    case ElemType::S8: return c10::ScalarType::Char;
    case ElemType::S16: return c10::ScalarType::Short;
    case ElemType::S32: return c10::ScalarType::Int;
    case ElemType::S64: return c10::ScalarType::Long;
    case ElemType::U8: return c10::ScalarType::Byte;
    case ElemType::U16: return c10::ScalarType::UInt16;
    case ElemType::U32: return c10::ScalarType::UInt32;
    case ElemType::U64: return c10::ScalarType::UInt64;
    case ElemType::F16: return c10::ScalarType::Half;
    case ElemType::BF16: return c10::ScalarType::BFloat16;
    case ElemType::F32: return c10::ScalarType::Float;
    case ElemType::F64: return c10::ScalarType::Double;
    case ElemType::C64: return c10::ScalarType::ComplexFloat;
    case ElemType::C128: return c10::ScalarType::ComplexDouble;
    case ElemType::F8E4M3FN: return c10::ScalarType::Float8_e4m3fn;
    case ElemType::F8E5M2: return c10::ScalarType::Float8_e5m2;
    case ElemType::F8E4M3FNUZ: return c10::ScalarType::Float8_e4m3fnuz;
    case ElemType::F8E5M2FNUZ: return c10::ScalarType::Float8_e5m2fnuz;
  }
  return c10::ScalarType::Undefined;
}

hlo::Value Ctx::tensor(size_t i) const {
  const Arg& a = arg(i);
  TORCH_CHECK(a.kind == Arg::kTensor, schema_.name(), ": argument ", i, " is not a tensor");
  return a.tensor;
}

std::optional<hlo::Value> Ctx::opt_tensor(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind == Arg::kNone) return std::nullopt;
  return tensor(i);
}

std::vector<hlo::Value> Ctx::tensors(size_t i) const {
  const Arg& a = arg(i);
  TORCH_CHECK(a.kind == Arg::kTensorList, schema_.name(), ": argument ", i,
              " is not a tensor list");
  return a.tensors;
}

c10::ScalarType Ctx::dtype(size_t i) const {
  const Arg& a = arg(i);
  TORCH_CHECK(a.kind == Arg::kTensor, schema_.name(), ": argument ", i, " is not a tensor");
  return a.dtype;
}

hlo::Value Ctx::scalar(size_t i, hlo::ElemType t) const {
  const Arg& a = arg(i);
  TORCH_CHECK(a.kind == Arg::kScalar, schema_.name(), ": argument ", i, " is not a scalar");
  hlo::Value v = a.scalar;
  if (hlo::is_complex(v.elem()) && !hlo::is_complex(t)) v = b.unary("real", v);
  return hlo::is_float8(t) ? cast(b, v, t) : b.convert(v, t);
}

std::vector<hlo::Value> Ctx::scalar_list(size_t i, hlo::ElemType t) const {
  const Arg& a = arg(i);
  TORCH_CHECK(a.kind == Arg::kScalarList, schema_.name(), ": argument ", i,
              " is not a scalar list");
  std::vector<hlo::Value> out;
  for (const auto& v : a.scalars) out.push_back(hlo::is_float8(t) ? cast(b, v, t) : b.convert(v, t));
  return out;
}

c10::ScalarType Ctx::scalar_kind(size_t i) const {
  const Arg& a = arg(i);
  if (a.kind == Arg::kScalar) return to_scalar_type(a.scalar.elem());
  return c10::ScalarType::Undefined;
}

int64_t Ctx::int_arg(size_t i) const { return value(i).toInt(); }

std::vector<int64_t> Ctx::ints(size_t i) const {
  const c10::IValue& v = value(i);
  if (v.isNone()) return {};
  if (v.isInt()) return {v.toInt()};
  return v.toIntVector();
}

std::optional<int64_t> Ctx::opt_int(size_t i) const {
  const c10::IValue& v = value(i);
  if (v.isNone()) return std::nullopt;
  return v.toInt();
}

bool Ctx::bool_arg(size_t i) const { return value(i).toBool(); }

double Ctx::double_arg(size_t i) const {
  const c10::IValue& v = value(i);
  if (v.isDouble()) return v.toDouble();
  if (v.isInt()) return static_cast<double>(v.toInt());
  if (v.isScalar()) return v.toScalar().toDouble();
  TORCH_CHECK(false, schema_.name(), ": argument ", i, " is not a number");
}

std::string Ctx::str_arg(size_t i) const { return value(i).toStringRef(); }

std::optional<c10::ScalarType> Ctx::opt_dtype(size_t i) const {
  const c10::IValue& v = value(i);
  if (v.isNone()) return std::nullopt;
  return static_cast<c10::ScalarType>(v.toInt());
}

c10::ScalarType Ctx::out_dtype(size_t k) const {
  TORCH_CHECK(k < out_meta_.size(), schema_.name(), ": result ", k, " has no known dtype");
  return out_meta_[k].dtype;
}

hlo::Value Ctx::rng_state(uint64_t numbers) {
  TORCH_CHECK(rng_param_.valid(), schema_.name(),
              ": lowering draws random numbers but was not registered with needs_rng");
  rng_numbers_ += numbers;
  return rng_param_;
}

namespace {
std::unordered_map<std::string, Lowering>& table() {
  static auto* t = new std::unordered_map<std::string, Lowering>();
  return *t;
}

// "add.Tensor" -> "aten::add.Tensor"; a name with a namespace stays as it is.
std::string qualified(const std::string& name) {
  return name.find("::") != std::string::npos ? name : "aten::" + name;
}
}  // namespace

void add(const std::string& name, LowerFn fn, std::vector<int> static_args, bool needs_rng) {
  const std::string key = qualified(name);
  table()[key] = Lowering{key, std::move(fn), std::move(static_args), needs_rng};
}

void skip_meta(const std::string& name) {
  table().at(qualified(name)).skip_meta = true;
}

void update_in_place(const std::string& name) { table().at(name).in_place = true; }

void scalars_as_self(const std::string& name) {
  table().at(qualified(name)).scalars_as_self = true;
}

const Lowering* find(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : &it->second;
}

const std::unordered_map<std::string, Lowering>& all() { return table(); }

}  // namespace tpu::lower

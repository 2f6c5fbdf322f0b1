// Random ops on the device Philox generator: the (seed, offset) pair is a
// runtime input (Ctx::rng_state), so reseeding never recompiles.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

// Uniform floats in [0, 1) of type t (f64 uses 64-bit draws, others 32-bit).
Value uniform01(Ctx& c, const std::vector<int64_t>& dims, ElemType t) {
  hlo::Builder& b = c.b;
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (t == ElemType::F64) {
    Value state = c.rng_state(static_cast<uint64_t>(2 * n));
    Value bits = b.rng_bit_generator(state, {ElemType::U64, dims}).second;
    // 52 random mantissa bits under exponent 0 -> [1, 2), minus 1.
    Value m = b.binary("shift_right_logical", bits, b.splat_i(12, bits.type));
    Value one = b.binary("or", m, b.splat_i(0x3FF0000000000000LL, bits.type));
    return b.sub(b.bitcast_convert(one, {ElemType::F64, dims}), b.splat_f(1, {ElemType::F64, dims}));
  }
  Value state = c.rng_state(static_cast<uint64_t>(n));
  Value bits = b.rng_bit_generator(state, {ElemType::U32, dims}).second;
  Value m = b.binary("shift_right_logical", bits, b.splat_i(9, bits.type));
  Value one = b.binary("or", m, b.splat_i(0x3F800000, bits.type));
  Value u = b.sub(b.bitcast_convert(one, {ElemType::F32, dims}), b.splat_f(1, {ElemType::F32, dims}));
  return cast(b, u, opmath(t));
}

}  // namespace

void register_random() {
  // uniform_(Tensor(a!) self, float from=0, float to=1, *, Generator? generator=None)
  add("uniform_", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = opmath(self.elem());
    Value u = uniform01(c, self.dims(), t);
    Value from = bcast(c.b, c.scalar(1, t), self.dims());
    Value to = bcast(c.b, c.scalar(2, t), self.dims());
    return {c.b.add(from, c.b.mul(u, c.b.sub(to, from)))};
  }, {}, true);
  // normal_(Tensor(a!) self, float mean=0, float std=1, *, Generator? generator=None)
  add("normal_", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = opmath(self.elem());
    hlo::Builder& b = c.b;
    // Box-Muller on two uniform draws; 1 - u keeps the log argument in (0, 1].
    Value u1 = uniform01(c, self.dims(), t);
    Value u2 = uniform01(c, self.dims(), t);
    Value r = b.unary("sqrt", b.mul(scalar_like(b, -2, u1), b.unary("log", b.sub(scalar_like(b, 1, u1), u1))));
    Value theta = b.mul(scalar_like(b, 6.283185307179586, u2), u2);
    Value z = b.mul(r, b.unary("cosine", theta));
    Value mean = bcast(b, c.scalar(1, t), self.dims());
    Value std = bcast(b, c.scalar(2, t), self.dims());
    return {b.add(mean, b.mul(z, std))};
  }, {}, true);
  // bernoulli_.float(Tensor(a!) self, float p=0.5, *, Generator? generator=None)
  add("bernoulli_.float", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    Value u = uniform01(c, self.dims(), ElemType::F32);
    Value p = bcast(c.b, c.scalar(1, ElemType::F32), self.dims());
    return {cast(c.b, c.b.compare(u, p, hlo::Cmp::LT), self.elem())};
  }, {}, true);
}

}  // namespace tpu::lower

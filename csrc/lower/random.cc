// Random ops on the device Philox generator (uniform_, normal_, bernoulli_,
// random_, randperm, multinomial): the (seed, offset) pair is a
// runtime input (Ctx::rng_state), so reseeding never recompiles.
#include <limits>

#include "lower/random_draws.h"

namespace tpu::lower {

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

Value standard_normal(Ctx& c, const std::vector<int64_t>& dims, ElemType t) {
  hlo::Builder& b = c.b;
  // Box-Muller on two uniform draws; 1 - u keeps the log argument in (0, 1].
  // Both uniforms come from one draw: two draws from the same state would
  // be equal (the state is one runtime input per op).
  std::vector<int64_t> two = dims;
  two.insert(two.begin(), 2);
  Value u = uniform01(c, two, t);
  std::vector<int64_t> lim = two, start(two.size(), 0), step(two.size(), 1);
  lim[0] = 1;
  Value u1 = b.reshape(b.slice(u, start, lim, step), dims);
  start[0] = 1;
  lim[0] = 2;
  Value u2 = b.reshape(b.slice(u, start, lim, step), dims);
  Value r = b.unary("sqrt", b.mul(scalar_like(b, -2, u1), b.unary("log", b.sub(scalar_like(b, 1, u1), u1))));
  Value theta = b.mul(scalar_like(b, 6.283185307179586, u2), u2);
  return b.mul(r, b.unary("cosine", theta));
}

namespace {

// n random bits per element of `dims` (32 or 64), as U32/U64.
Value random_bits(Ctx& c, const std::vector<int64_t>& dims, bool wide) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  Value state = c.rng_state(static_cast<uint64_t>((wide ? 2 : 1) * n));
  return c.b.rng_bit_generator(state, {wide ? ElemType::U64 : ElemType::U32, dims}).second;
}

// Integers uniform in [from, from + range) as type t (range > 0), like
// PyTorch's random_from_to: 64-bit draws when the range needs them.
Value random_range(Ctx& c, const std::vector<int64_t>& dims, int64_t from, uint64_t range, ElemType t) {
  hlo::Builder& b = c.b;
  bool wide = range > (uint64_t{1} << 32);
  Value bits = cast(b, random_bits(c, dims, wide), ElemType::U64);
  Value r = b.binary("remainder", bits, b.splat_i(static_cast<int64_t>(range), bits.type));
  Value v = b.add(b.bitcast_convert(r, {ElemType::S64, dims}), b.splat_i(from, {ElemType::S64, dims}));
  return cast(b, v, t);
}

// The largest value random_() draws for a dtype: 2^digits for floats, max for ints.
uint64_t random_max(ElemType t) {
  switch (t) {
    case ElemType::PRED: return 1;
    case ElemType::F16: return uint64_t{1} << 11;
    case ElemType::BF16: return uint64_t{1} << 8;
    case ElemType::F32: return uint64_t{1} << 24;
    case ElemType::F64: return uint64_t{1} << 53;
    default: break;
  }
  int bits = hlo::bit_width(t);
  if (hlo::is_signed_int(t)) return (uint64_t{1} << (bits - 1)) - 1;
  return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

// Sorts `keys` ([..., C], ascending) and returns the matching positions (S64).
Value argsort(hlo::Builder& b, Value keys) {
  int64_t last = keys.rank() - 1;
  Value pos = b.iota({ElemType::S64, keys.dims()}, last);
  auto sorted = b.sort({keys, pos}, last, true, [](hlo::Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{r.compare(a[0], a[1], hlo::Cmp::LT)};
  });
  return sorted[1];
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
    Value z = standard_normal(c, self.dims(), t);
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
  // random_(self), random_.from(self, from, to?), random_.to(self, to).
  add("random_", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    uint64_t hi = random_max(self.elem());
    return {random_range(c, self.dims(), 0, hi == ~uint64_t{0} ? hi : hi + 1, self.elem())};
  }, {}, true);
  add("random_.from", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    int64_t from = c.int_arg(1);
    uint64_t range = c.is_none(2) ? random_max(self.elem()) + 1 - static_cast<uint64_t>(from)
                                  : static_cast<uint64_t>(c.int_arg(2) - from);
    if (range == 0) range = ~uint64_t{0};  // the full 64-bit range
    return {random_range(c, self.dims(), from, range, self.elem())};
  }, {}, true);
  add("random_.to", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    return {random_range(c, self.dims(), 0, static_cast<uint64_t>(c.int_arg(1)), self.elem())};
  }, {}, true);
  // randperm.generator_out(n, *, generator, out): positions sorted by random keys.
  add("randperm.generator_out", [](Ctx& c) -> std::vector<Value> {
    Value out = c.tensor(2);
    int64_t n = out.type.numel();
    Value keys = random_bits(c, {n}, true);
    return {cast(c.b, argsort(c.b, keys), out.elem())};
  }, {}, true);
  // multinomial(self [C] or [B, C], num_samples, replacement).
  add("multinomial", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value p = cast(b, c.tensor(0), t);
    bool batched = p.rank() == 2;
    if (!batched) p = b.reshape(p, {1, p.dims()[0]});
    int64_t rows = p.dims()[0], cats = p.dims()[1], n = c.int_arg(1);
    Value idx;
    if (c.bool_arg(2)) {
      // Inverse CDF: the first category whose running total exceeds u * total.
      std::vector<double> tri(static_cast<size_t>(cats * cats), 0.0);
      for (int64_t i = 0; i < cats; ++i)
        for (int64_t j = i; j < cats; ++j) tri[static_cast<size_t>(i * cats + j)] = 1.0;
      Value cdf = b.dot_general(p, b.dense_f(tri, {t, {cats, cats}}), {}, {}, {1}, {0}, t);
      Value total = b.slice(cdf, {0, cats - 1}, {rows, cats}, {1, 1});  // [rows, 1]
      Value u = b.mul(uniform01(c, {rows, n}, t), b.broadcast_in_dim(b.reshape(total, {rows}), {rows, n}, {0}));
      Value le = b.compare(b.broadcast_in_dim(cdf, {rows, n, cats}, {0, 2}),
                           b.broadcast_in_dim(u, {rows, n, cats}, {0, 1}), hlo::Cmp::LE);
      idx = reduce_sum(b, cast(b, le, ElemType::S64), {2}, false);
      idx = b.min(idx, b.splat_i(cats - 1, idx.type));
    } else {
      // Exponential race: the n smallest E / p (E ~ Exp(1)) are a draw without
      // replacement; zero-probability categories get +inf keys and come last.
      Value e = b.neg(b.unary("log", b.sub(scalar_like(b, 1, p), uniform01(c, {rows, cats}, t))));
      Value keys = b.select(b.compare(p, zeros_like(b, p), hlo::Cmp::GT), b.div(e, p),
                            b.splat_f(std::numeric_limits<double>::infinity(), p.type));
      Value first = argsort(b, keys);
      idx = b.slice(first, {0, 0}, {rows, n}, {1, 1});
    }
    if (!batched) idx = b.reshape(idx, {n});
    return {idx};
  }, {}, true);
}

}  // namespace tpu::lower

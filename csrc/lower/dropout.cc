// Dropout: native_dropout draws its keep-mask from the device Philox generator
// (Ctx::rng_state, a runtime input, so reseeding never recompiles).
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

// Uniform f32 in [0, 1): 23 random mantissa bits under exponent 0, minus 1.
Value uniform01_f32(Ctx& c, const std::vector<int64_t>& dims) {
  hlo::Builder& b = c.b;
  Value state = c.rng_state(static_cast<uint64_t>(numel_of(dims)));
  Value bits = b.rng_bit_generator(state, {ElemType::U32, dims}).second;
  Value m = b.binary("shift_right_logical", bits, b.splat_i(9, bits.type));
  Value one = b.binary("or", m, b.splat_i(0x3F800000, bits.type));
  return b.sub(b.bitcast_convert(one, {ElemType::F32, dims}), b.splat_f(1, {ElemType::F32, dims}));
}

}  // namespace

void register_dropout() {
  // native_dropout(input, p, train?) -> (output, mask). Keeps an element with
  // probability 1 - p and scales kept ones by 1 / (1 - p) (0 when p == 1).
  add("native_dropout", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    ElemType t = float_opmath(c.dtype(0));
    bool train = c.is_none(2) || c.bool_arg(2);
    if (!train) return {x, b.splat_i(1, {ElemType::PRED, x.dims()})};
    Value u = uniform01_f32(c, x.dims());
    Value p = bcast(b, c.scalar(1, ElemType::F32), x.dims());
    Value keep = b.compare(u, b.sub(b.splat_f(1, p.type), p), hlo::Cmp::LT);
    Value pt = bcast(b, c.scalar(1, t), x.dims());
    Value one = b.splat_f(1, {t, x.dims()});
    Value scale = b.select(b.compare(pt, one, hlo::Cmp::EQ), b.splat_f(0, {t, x.dims()}),
                           b.div(one, b.sub(one, pt)));
    Value xf = cast(b, x, t);
    Value y = b.select(keep, b.mul(xf, scale), zeros_like(b, xf));
    return {y, keep};
  }, {}, true);
  // native_dropout_backward(grad_output, mask, scale)
  add("native_dropout_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = float_opmath(c.dtype(0));
    Value g = cast(b, c.tensor(0), t);
    Value m = bcast(b, cast(b, c.tensor(1), t), g.dims());
    return {b.mul(b.mul(g, m), bcast(b, c.scalar(2, t), g.dims()))};
  });
}

}  // namespace tpu::lower

// In-place samplers of continuous and discrete distributions on the device
// Philox generator: exponential_, cauchy_, geometric_, log_normal_. Each is an
// inverse-CDF (or exp of normal) transform of one uniform / normal draw, so a
// seed gives the same numbers in every execution mode. Parameters are runtime
// scalars: changing them never recompiles.
#include <cmath>

#include "lower/random_draws.h"

namespace tpu::lower {

namespace {

// The float type a sampler computes in for `self`: opmath of a float self;
// integer tensors (geometric_ accepts them) draw in float32.
ElemType draw_type(Value self) {
  return hlo::is_float(self.elem()) ? opmath(self.elem()) : ElemType::F32;
}

// -log(1 - u) with u uniform in [0, 1): a standard exponential sample; 1 - u
// lies in (0, 1], so the log is finite.
Value neg_log_1mu(hlo::Builder& b, Value u) {
  return b.neg(b.unary("log_plus_one", b.neg(u)));
}

}  // namespace

void register_distributions() {
  // exponential_(self, lambd=1): -log(1 - u) / lambd.
  add("exponential_", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = draw_type(self);
    Value e = neg_log_1mu(c.b, uniform01(c, self.dims(), t));
    return {c.b.div(e, bcast(c.b, c.scalar(1, t), self.dims()))};
  }, {}, true);
  // cauchy_(self, median=0, sigma=1): median + sigma * tan(pi * (u - 1/2)).
  add("cauchy_", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value self = c.tensor(0);
    ElemType t = draw_type(self);
    Value u = uniform01(c, self.dims(), t);
    Value z = b.unary("tan", b.mul(scalar_like(b, M_PI, u), b.sub(u, scalar_like(b, 0.5, u))));
    Value median = bcast(b, c.scalar(1, t), self.dims()), sigma = bcast(b, c.scalar(2, t), self.dims());
    return {b.add(median, b.mul(sigma, z))};
  }, {}, true);
  // geometric_(self, p): trials up to the first success, ceil(log(1 - u) / log(1 - p)),
  // at least 1 (u = 0 would give 0).
  add("geometric_", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value self = c.tensor(0);
    ElemType t = draw_type(self);
    Value e = neg_log_1mu(b, uniform01(c, self.dims(), t));
    Value p = bcast(b, c.scalar(1, t), self.dims());
    Value rate = b.neg(b.unary("log_plus_one", b.neg(p)));  // -log(1 - p) > 0
    Value k = b.unary("ceil", b.div(e, rate));
    return {b.max(k, scalar_like(b, 1, k))};
  }, {}, true);
  // log_normal_(self, mean=1, std=2): exp(mean + std * z), z standard normal.
  add("log_normal_", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value self = c.tensor(0);
    ElemType t = draw_type(self);
    Value z = standard_normal(c, self.dims(), t);
    Value mean = bcast(b, c.scalar(1, t), self.dims()), std = bcast(b, c.scalar(2, t), self.dims());
    return {b.unary("exponential", b.add(mean, b.mul(std, z)))};
  }, {}, true);
}

}  // namespace tpu::lower

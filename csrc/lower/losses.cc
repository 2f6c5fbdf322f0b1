// Pointwise regression / binary losses: mse, smooth_l1, huber,
// binary_cross_entropy; forward (with reduction none=0 / mean=1 / sum=2) and
// backward. (nll_loss lives in nn.cc.)
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

Value reduce_loss(hlo::Builder& b, Value l, int64_t reduction) {
  if (reduction == 0) return l;
  Value s = reduce_sum(b, l, iota_dims(0, l.rank()), false);
  if (reduction == 2) return s;
  return b.div(s, b.constant_f(static_cast<double>(std::max<int64_t>(l.type.numel(), 1)), s.elem()));
}

// Gradient of the reduced loss w.r.t. each element, times d(loss_i)/d(x_i).
Value loss_grad(hlo::Builder& b, Value g, Value local, int64_t reduction) {
  g = bcast(b, g, local.dims());
  if (reduction == 1)
    g = b.div(g, scalar_like(b, static_cast<double>(std::max<int64_t>(local.type.numel(), 1)), g));
  return b.mul(g, local);
}

struct Pair {
  Value x, y;
};

// (self, target) at args i, i+1 aligned in opmath.
Pair operands(Ctx& c, size_t i) {
  ElemType t = float_opmath(result_type(c, {i, i + 1}));
  auto [x, y] = align(c.b, c.tensor(i), c.tensor(i + 1), t);
  return {x, y};
}

Value half(hlo::Builder& b, Value like) { return scalar_like(b, 0.5, like); }

}  // namespace

void register_losses() {
  // mse_loss(self, target, reduction)
  add("mse_loss", [](Ctx& c) -> std::vector<Value> {
    auto [x, y] = operands(c, 0);
    Value d = c.b.sub(x, y);
    return {reduce_loss(c.b, c.b.mul(d, d), c.int_arg(2))};
  });
  // mse_loss_backward(grad_output, self, target, reduction)
  add("mse_loss_backward", [](Ctx& c) -> std::vector<Value> {
    auto [x, y] = operands(c, 1);
    Value d = c.b.sub(x, y);
    Value g = cast(c.b, c.tensor(0), x.elem());
    return {loss_grad(c.b, g, c.b.mul(scalar_like(c.b, 2, d), d), c.int_arg(3))};
  });
  // smooth_l1_loss(self, target, reduction, beta)
  add("smooth_l1_loss", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 0);
    Value d = b.unary("abs", b.sub(x, y));
    Value beta = scalar_bcast(c, 3, d.elem(), d.dims());
    Value quad = b.div(b.mul(half(b, d), b.mul(d, d)), beta);
    Value lin = b.sub(d, b.mul(half(b, d), beta));
    return {reduce_loss(b, b.select(b.compare(d, beta, Cmp::LT), quad, lin), c.int_arg(2))};
  });
  // smooth_l1_loss_backward(grad_output, self, target, reduction, beta)
  add("smooth_l1_loss_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 1);
    Value d = b.sub(x, y);
    Value beta = scalar_bcast(c, 4, d.elem(), d.dims());
    Value local = b.select(b.compare(b.unary("abs", d), beta, Cmp::LT), b.div(d, beta), b.unary("sign", d));
    return {loss_grad(b, cast(b, c.tensor(0), d.elem()), local, c.int_arg(3))};
  });
  // huber_loss(self, target, reduction, delta)
  add("huber_loss", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 0);
    Value d = b.unary("abs", b.sub(x, y));
    Value delta = scalar_bcast(c, 3, d.elem(), d.dims());
    Value quad = b.mul(half(b, d), b.mul(d, d));
    Value lin = b.mul(delta, b.sub(d, b.mul(half(b, d), delta)));
    return {reduce_loss(b, b.select(b.compare(d, delta, Cmp::LT), quad, lin), c.int_arg(2))};
  });
  // huber_loss_backward(grad_output, self, target, reduction, delta)
  add("huber_loss_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 1);
    Value d = b.sub(x, y);
    Value delta = scalar_bcast(c, 4, d.elem(), d.dims());
    Value local = b.clamp(b.neg(delta), d, delta);
    return {loss_grad(b, cast(b, c.tensor(0), d.elem()), local, c.int_arg(3))};
  });
  // binary_cross_entropy(self, target, weight?, reduction); logs clamp at -100 as PyTorch.
  add("binary_cross_entropy", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 0);
    Value lo = scalar_like(b, -100, x);
    Value one = scalar_like(b, 1, x);
    Value lx = b.max(b.unary("log", x), lo), l1x = b.max(b.unary("log", b.sub(one, x)), lo);
    Value l = b.neg(b.add(b.mul(y, lx), b.mul(b.sub(one, y), l1x)));
    if (auto w = c.opt_tensor(2)) l = b.mul(l, bcast(b, cast(b, *w, l.elem()), l.dims()));
    return {reduce_loss(b, l, c.int_arg(3))};
  });
  // binary_cross_entropy_backward(grad_output, self, target, weight?, reduction)
  add("binary_cross_entropy_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto [x, y] = operands(c, 1);
    Value one = scalar_like(b, 1, x);
    Value den = b.max(b.mul(b.sub(one, x), x), scalar_like(b, 1e-12, x));
    Value local = b.div(b.sub(x, y), den);
    if (auto w = c.opt_tensor(3)) local = b.mul(local, bcast(b, cast(b, *w, x.elem()), x.dims()));
    return {loss_grad(b, cast(b, c.tensor(0), x.elem()), local, c.int_arg(4))};
  });
}

}  // namespace tpu::lower

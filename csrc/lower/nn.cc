// Neural-network ops: softmax family, the negative log-likelihood loss and
// cross_entropy over class indices (aten/no_grad_composites.cc).
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

Value log_softmax(hlo::Builder& b, Value x, int64_t dim) {
  Value m = reduce_max(b, x, {dim}, true);
  Value shifted = b.sub(x, bcast(b, m, x.dims()));
  Value lse = b.unary("log", reduce_sum(b, b.unary("exponential", shifted), {dim}, true));
  return b.sub(shifted, bcast(b, lse, x.dims()));
}

Value softmax(hlo::Builder& b, Value x, int64_t dim) {
  Value m = reduce_max(b, x, {dim}, true);
  Value e = b.unary("exponential", b.sub(x, bcast(b, m, x.dims())));
  return b.div(e, bcast(b, reduce_sum(b, e, {dim}, true), x.dims()));
}

// The element of x where `mask` (x's shape) is set along `dim`, 0 where no element
// is (a one-hot pick). A variadic reduction that takes the masked element instead
// of a sum of the selected element and zeros: the same value (a -0.0 stays -0.0,
// as the CPU's nll_loss), in one kernel, where XLA's CPU compiler splits a sum over
// more than 32 classes into two (see Builder::reduce).
Value pick_along(hlo::Builder& b, Value x, Value mask, int64_t dim) {
  auto body = [](hlo::Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
    // (value so far, any so far, element, its mask)
    return {r.select(a[3], a[2], a[0]), r.binary("or", a[1], a[3])};
  };
  return b.reduce({x, mask}, {b.constant_f(0, x.elem()), b.constant_i(0, ElemType::PRED)}, {dim},
                  body)[0];
}

// One-hot mask [N, C] (or [C]) of `target`, false where target == ignore_index.
struct Picked {
  Value mask;    // PRED, self's shape
  Value weight;  // per-sample weight (0 where ignored), target's shape, type t
};

Picked pick(Ctx& c, Value self, Value target, std::optional<Value> weight, int64_t ignore, ElemType t) {
  hlo::Builder& b = c.b;
  int64_t cdim = self.rank() == 1 ? 0 : 1;
  int64_t classes = self.dims()[cdim];
  Value tgt = cast(b, target, ElemType::S64);
  Value iota = b.iota({ElemType::S64, self.dims()}, cdim);
  std::vector<int64_t> tdims = tgt.dims();
  std::vector<int64_t> bdims;
  for (int64_t d = 0; d < self.rank(); ++d)
    if (d != cdim) bdims.push_back(d);
  Value tb = b.broadcast_in_dim(tgt, self.dims(), bdims);
  Value mask = b.compare(iota, tb, Cmp::EQ);
  Value valid = b.compare(tgt, b.splat_i(ignore, tgt.type), Cmp::NE);
  Value w;
  if (weight) {
    Value wb = b.broadcast_in_dim(cast(b, *weight, t), self.dims(), {cdim});
    w = pick_along(b, wb, mask, cdim);
  } else {
    w = b.splat_f(1, {t, tdims});
  }
  Value bad = b.binary("and", valid, b.binary("or", b.compare(tgt, b.splat_i(0, tgt.type), Cmp::LT),
                                                b.compare(tgt, b.splat_i(classes, tgt.type), Cmp::GE)));
  c.check(bad, tgt, {CheckSpec::kIndexError, "Target {} is out of bounds (" + std::to_string(classes) +
                                                 " classes)."});
  w = b.select(valid, w, zeros_like(b, w));
  return {mask, w};
}

// nll_loss_forward's results (loss, total weight) for x, self in opmath(t), with
// target and weight the op's arguments 1 and 2.
std::vector<Value> nll(Ctx& c, Value x, int64_t reduction, int64_t ignore) {
  ElemType t = x.elem();
  Picked p = pick(c, x, c.tensor(1), c.opt_tensor(2), ignore, t);
  int64_t cdim = x.rank() == 1 ? 0 : 1;
  Value picked = pick_along(c.b, x, p.mask, cdim);
  Value loss = c.b.neg(c.b.mul(picked, p.weight));
  std::vector<int64_t> all;
  for (int64_t d = 0; d < loss.rank(); ++d) all.push_back(d);
  Value total = reduce_sum(c.b, p.weight, all, false);
  if (reduction == 0) return {loss, total};
  Value sum = reduce_sum(c.b, loss, all, false);
  if (reduction == 1) return {c.b.div(sum, total), total};
  return {sum, total};
}

}  // namespace

void register_nn() {
  add("_log_softmax", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    if (x.rank() == 0) return {zeros_like(c.b, x)};
    return {log_softmax(c.b, cast(c.b, x, opmath(x.elem())), dim)};
  });
  add("_softmax", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    if (x.rank() == 0) return {scalar_like(c.b, 1, x)};
    return {softmax(c.b, cast(c.b, x, opmath(x.elem())), dim)};
  });
  add("_log_softmax_backward_data", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value g = cast(c.b, c.tensor(0), t), out = cast(c.b, c.tensor(1), t);
    if (g.rank() == 0) return {g};
    int64_t dim = wrap_dim(c.int_arg(2), g.rank());
    Value s = bcast(c.b, reduce_sum(c.b, g, {dim}, true), g.dims());
    return {c.b.sub(g, c.b.mul(c.b.unary("exponential", out), s))};
  });
  add("_softmax_backward_data", [](Ctx& c) -> std::vector<Value> {
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value g = cast(c.b, c.tensor(0), t), out = cast(c.b, c.tensor(1), t);
    if (g.rank() == 0) return {zeros_like(c.b, g)};
    int64_t dim = wrap_dim(c.int_arg(2), g.rank());
    Value s = bcast(c.b, reduce_sum(c.b, c.b.mul(g, out), {dim}, true), g.dims());
    return {c.b.mul(out, c.b.sub(g, s))};
  });
  // nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight).
  // nll_loss2d_forward has the same arguments with self [N, C, H, W]; pick()
  // handles any rank with classes on dim 1, so one lowering serves both.
  auto nll_forward = [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    return nll(c, cast(c.b, self, opmath(self.elem())), c.int_arg(3), c.int_arg(4));
  };
  add("nll_loss_forward", nll_forward);
  add("nll_loss2d_forward", nll_forward);
  // cross_entropy_loss(self, target, weight?, reduction, ignore_index, label_smoothing):
  // log_softmax and nll_loss in one program, for what aten/no_grad_composites.cc
  // routes here (class indices, no label smoothing: the argument is not read).
  // The log-probabilities are rounded to self's dtype, as the decomposition's
  // log_softmax returns them.
  add("cross_entropy_loss", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    ElemType t = opmath(self.elem());
    int64_t cdim = self.rank() == 1 ? 0 : 1;
    Value lsm = cast(c.b, log_softmax(c.b, cast(c.b, self, t), cdim), self.elem());
    return {nll(c, cast(c.b, lsm, t), c.int_arg(3), c.int_arg(4))[0]};
  });
  // nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?,
  // reduction, ignore_index, total_weight)
  auto nll_backward = [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(1);
    ElemType t = opmath(self.elem());
    int64_t reduction = c.int_arg(4), ignore = c.int_arg(5);
    Picked p = pick(c, cast(c.b, self, t), c.tensor(2), c.opt_tensor(3), ignore, t);
    Value g = cast(c.b, c.tensor(0), t);
    if (reduction == 1) g = c.b.div(g, cast(c.b, c.tensor(6), t));
    int64_t cdim = self.rank() == 1 ? 0 : 1;
    std::vector<int64_t> bdims;
    for (int64_t d = 0; d < self.rank(); ++d)
      if (d != cdim) bdims.push_back(d);
    Value per = c.b.mul(p.weight, reduction == 0 ? g : bcast(c.b, g, p.weight.dims()));
    Value perb = c.b.broadcast_in_dim(c.b.neg(per), self.dims(), bdims);
    Value zero = zeros_like(c.b, perb);
    return {c.b.select(p.mask, perb, zero)};
  };
  add("nll_loss_backward", nll_backward);
  add("nll_loss2d_backward", nll_backward);
}

}  // namespace tpu::lower

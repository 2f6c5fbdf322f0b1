// Normalisation layers: layer norm, batch norm (train and eval, with running
// statistics), group norm; forward and backward. Statistics are computed in
// opmath (f32 for half types) with the two-pass (x - mean)^2 variance, which
// matches PyTorch's CPU kernels closely.
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

struct Stats {
  Value mean;  // keepdim shape
  Value var;   // biased variance, keepdim shape
};

Stats moments(hlo::Builder& b, Value x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims()[d];
  Value inv_n = b.splat_f(1.0 / static_cast<double>(n > 0 ? n : 1), {x.elem(), {}});
  Value mean = reduce_sum(b, x, dims, true);
  mean = b.mul(mean, bcast(b, inv_n, mean.dims()));
  Value xc = b.sub(x, bcast(b, mean, x.dims()));
  Value var = reduce_sum(b, b.mul(xc, xc), dims, true);
  var = b.mul(var, bcast(b, inv_n, var.dims()));
  return {mean, var};
}

Value rsqrt_eps(Ctx& c, Value var, size_t eps_arg) {
  Value eps = scalar_bcast(c, eps_arg, var.elem(), var.dims());
  return c.b.unary("rsqrt", c.b.add(var, eps));
}

// dx for y = xhat * w (+ b) where xhat = (x - mean) * rstd normalises over
// `dims` with n elements: rstd * (gw - mean(gw) - xhat * mean(gw * xhat)).
Value norm_input_grad(hlo::Builder& b, Value gw, Value xhat, Value rstd,
                      const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= gw.dims()[d];
  Value inv_n = b.splat_f(1.0 / static_cast<double>(n > 0 ? n : 1), {gw.elem(), gw.dims()});
  Value m1 = b.mul(bcast(b, reduce_sum(b, gw, dims, true), gw.dims()), inv_n);
  Value m2 = b.mul(bcast(b, reduce_sum(b, b.mul(gw, xhat), dims, true), gw.dims()), inv_n);
  return b.mul(bcast(b, rstd, gw.dims()), b.sub(b.sub(gw, m1), b.mul(xhat, m2)));
}

// ---- layer norm -------------------------------------------------------------

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
std::vector<Value> layer_norm(Ctx& c) {
  hlo::Builder& b = c.b;
  Value in = c.tensor(0);
  ElemType t = float_opmath(c.dtype(0));
  Value x = cast(b, in, t);
  int64_t k = static_cast<int64_t>(c.ints(1).size());
  auto dims = iota_dims(x.rank() - k, x.rank());
  Stats s = moments(b, x, dims);
  Value rstd = rsqrt_eps(c, s.var, 4);
  Value y = b.mul(b.sub(x, bcast(b, s.mean, x.dims())), bcast(b, rstd, x.dims()));
  if (auto w = c.opt_tensor(2)) y = b.mul(y, bcast(b, cast(b, *w, t), x.dims()));
  if (auto bias = c.opt_tensor(3)) y = b.add(y, bcast(b, cast(b, *bias, t), x.dims()));
  return {y, fit_meta(c, 1, s.mean), fit_meta(c, 2, rstd)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd,
//                            weight?, bias?, output_mask) -> (dx, dw, db)
std::vector<Value> layer_norm_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value g = cast(b, c.tensor(0), t), x = cast(b, c.tensor(1), t);
  int64_t k = static_cast<int64_t>(c.ints(2).size());
  int64_t axis = x.rank() - k;
  auto inner = iota_dims(axis, x.rank()), outer = iota_dims(0, axis);
  Value mean = bcast(b, b.reshape(cast(b, c.tensor(3), t), c.tensor(3).dims()), x.dims());
  Value rstd = cast(b, c.tensor(4), t);
  Value xhat = b.mul(b.sub(x, mean), bcast(b, rstd, x.dims()));
  auto w = c.opt_tensor(5);
  Value gw = w ? b.mul(g, bcast(b, cast(b, *w, t), x.dims())) : g;
  Value dx = norm_input_grad(b, gw, xhat, rstd, inner);
  std::vector<int64_t> wshape(x.dims().begin() + axis, x.dims().end());
  Value dw = b.reshape(reduce_sum(b, b.mul(g, xhat), outer, false), wshape);
  Value db = b.reshape(reduce_sum(b, g, outer, false), wshape);
  return {fit_meta(c, 0, dx), fit_meta(c, 1, dw), fit_meta(c, 2, db)};
}

// ---- batch norm ---------------------------------------------------------------

struct BnOut {
  Value y, save_mean, save_invstd;
  Value new_rm, new_rv;  // valid only when running stats were given
};

// Batch norm over every dim but 1. `training` normalises with batch statistics
// and updates the running ones (momentum arg index `mom`); eval uses the running ones.
BnOut batch_norm(Ctx& c, std::optional<Value> w, std::optional<Value> bias,
                 std::optional<Value> rm, std::optional<Value> rv, bool training, size_t mom,
                 size_t eps) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value x = cast(b, c.tensor(0), t);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != 1) dims.push_back(d);
  int64_t ch = x.dims()[1];
  BnOut o;
  Value mean, invstd;
  if (training) {
    Stats s = moments(b, x, dims);
    mean = b.reshape(s.mean, {ch});
    Value var = b.reshape(s.var, {ch});
    invstd = rsqrt_eps(c, var, eps);
    o.save_mean = mean;
    o.save_invstd = invstd;
    if (rm && rv) {
      int64_t n = x.type.numel() / (ch > 0 ? ch : 1);
      Value m = scalar_bcast(c, mom, t, {ch});
      Value one_m = b.sub(b.splat_f(1, {t, {ch}}), m);
      Value unbiased = b.mul(var, b.splat_f(n > 1 ? double(n) / double(n - 1) : 1.0, {t, {ch}}));
      o.new_rm = b.add(b.mul(one_m, cast(b, *rm, t)), b.mul(m, mean));
      o.new_rv = b.add(b.mul(one_m, cast(b, *rv, t)), b.mul(m, unbiased));
    }
  } else {
    TORCH_CHECK(rm && rv, "batch_norm: running_mean and running_var must be defined in eval mode");
    mean = cast(b, *rm, t);
    invstd = rsqrt_eps(c, cast(b, *rv, t), eps);
    o.save_mean = mean;
    o.save_invstd = invstd;
    o.new_rm = *rm;
    o.new_rv = *rv;
  }
  Value scale = invstd;
  if (w) scale = b.mul(scale, cast(b, *w, t));
  Value shift = b.neg(b.mul(mean, scale));
  if (bias) shift = b.add(shift, cast(b, *bias, t));
  o.y = b.add(b.mul(x, per_channel(b, scale, x.dims(), 1)), per_channel(b, shift, x.dims(), 1));
  return o;
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
//     save_mean?, save_invstd?, train, eps, output_mask) -> (dx, dw, db)
std::vector<Value> batch_norm_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value g = cast(b, c.tensor(0), t), x = cast(b, c.tensor(1), t);
  bool train = c.bool_arg(7);
  int64_t ch = x.dims()[1];
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != 1) dims.push_back(d);
  Value mean, invstd;
  if (train) {
    mean = cast(b, *c.opt_tensor(5), t);
    invstd = cast(b, *c.opt_tensor(6), t);
  } else {
    mean = cast(b, *c.opt_tensor(3), t);
    invstd = rsqrt_eps(c, cast(b, *c.opt_tensor(4), t), 8);
  }
  auto w = c.opt_tensor(2);
  Value wv = w ? cast(b, *w, t) : b.splat_f(1, {t, {ch}});
  Value xhat = b.mul(b.sub(x, per_channel(b, mean, x.dims(), 1)), per_channel(b, invstd, x.dims(), 1));
  Value dx;
  if (train) {
    Value gw = b.mul(g, per_channel(b, wv, x.dims(), 1));
    dx = norm_input_grad(b, gw, xhat, b.reshape(per_channel(b, invstd, x.dims(), 1), x.dims()), dims);
  } else {
    dx = b.mul(g, per_channel(b, b.mul(wv, invstd), x.dims(), 1));
  }
  Value dw = reduce_sum(b, b.mul(g, xhat), dims, false);
  Value db = reduce_sum(b, g, dims, false);
  return {fit_meta(c, 0, dx), fit_meta(c, 1, dw), fit_meta(c, 2, db)};
}

// ---- group norm -----------------------------------------------------------------

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean[N,G], rstd[N,G])
std::vector<Value> group_norm(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value in = cast(b, c.tensor(0), t);
  int64_t n = c.int_arg(3), ch = c.int_arg(4), hw = c.int_arg(5), g = c.int_arg(6);
  Value x = b.reshape(in, {n, g, (ch / g) * hw});
  Stats s = moments(b, x, {2});
  Value rstd = rsqrt_eps(c, s.var, 7);
  Value y = b.mul(b.sub(x, bcast(b, s.mean, x.dims())), bcast(b, rstd, x.dims()));
  y = b.reshape(y, {n, ch, hw});
  if (auto w = c.opt_tensor(1)) y = b.mul(y, per_channel(b, cast(b, *w, t), y.dims(), 1));
  if (auto bias = c.opt_tensor(2)) y = b.add(y, per_channel(b, cast(b, *bias, t), y.dims(), 1));
  return {b.reshape(y, in.dims()), b.reshape(s.mean, {n, g}), b.reshape(rstd, {n, g})};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
//                            output_mask) -> (dx, dw, db)
std::vector<Value> group_norm_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  int64_t n = c.int_arg(5), ch = c.int_arg(6), hw = c.int_arg(7), g = c.int_arg(8);
  Value in = c.tensor(1);
  Value gr = b.reshape(cast(b, c.tensor(0), t), {n, ch, hw});
  Value x = b.reshape(cast(b, in, t), {n, g, (ch / g) * hw});
  Value mean = b.reshape(cast(b, c.tensor(2), t), {n, g, 1});
  Value rstd = b.reshape(cast(b, c.tensor(3), t), {n, g, 1});
  Value xhat = b.mul(b.sub(x, bcast(b, mean, x.dims())), bcast(b, rstd, x.dims()));
  auto w = c.opt_tensor(4);
  Value gw = w ? b.mul(gr, per_channel(b, cast(b, *w, t), gr.dims(), 1)) : gr;
  Value dx = norm_input_grad(b, b.reshape(gw, x.dims()), xhat, rstd, {2});
  Value xhat_c = b.reshape(xhat, {n, ch, hw});
  Value dw = reduce_sum(b, b.mul(gr, xhat_c), {0, 2}, false);
  Value db = reduce_sum(b, gr, {0, 2}, false);
  return {fit_meta(c, 0, b.reshape(dx, in.dims())), fit_meta(c, 1, dw), fit_meta(c, 2, db)};
}

}  // namespace

void register_norm() {
  add("native_layer_norm", layer_norm);
  add("native_layer_norm_backward", layer_norm_backward);
  // native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training,
  // momentum, eps). Its schema does not mark the running stats as written, so
  // this lowering cannot update them; the tpu kernel for native_batch_norm
  // (csrc/aten) routes training calls with running stats to
  // _native_batch_norm_legit, whose schema does.
  add("native_batch_norm", [](Ctx& c) -> std::vector<Value> {
    BnOut o = batch_norm(c, c.opt_tensor(1), c.opt_tensor(2), c.opt_tensor(3), c.opt_tensor(4),
                         c.bool_arg(5), 6, 7);
    return {o.y, fit_meta(c, 1, o.save_mean), fit_meta(c, 2, o.save_invstd)};
  });
  // _native_batch_norm_legit(input, w?, b?, running_mean(a!), running_var(b!), training,
  // momentum, eps) -> (out, save_mean, save_invstd) + new running stats.
  add("_native_batch_norm_legit", [](Ctx& c) -> std::vector<Value> {
    BnOut o = batch_norm(c, c.opt_tensor(1), c.opt_tensor(2), c.tensor(3), c.tensor(4),
                         c.bool_arg(5), 6, 7);
    return {o.y, fit_meta(c, 1, o.save_mean), fit_meta(c, 2, o.save_invstd), o.new_rm, o.new_rv};
  });
  add("_native_batch_norm_legit.no_stats", [](Ctx& c) -> std::vector<Value> {
    BnOut o = batch_norm(c, c.opt_tensor(1), c.opt_tensor(2), std::nullopt, std::nullopt,
                         c.bool_arg(3), 4, 5);
    return {o.y, fit_meta(c, 1, o.save_mean), fit_meta(c, 2, o.save_invstd)};
  });
  add("_native_batch_norm_legit_no_training", [](Ctx& c) -> std::vector<Value> {
    BnOut o = batch_norm(c, c.opt_tensor(1), c.opt_tensor(2), c.tensor(3), c.tensor(4), false, 5, 6);
    return {o.y, fit_meta(c, 1, o.save_mean), fit_meta(c, 2, o.save_invstd)};
  });
  add("_native_batch_norm_legit_functional", [](Ctx& c) -> std::vector<Value> {
    BnOut o = batch_norm(c, c.opt_tensor(1), c.opt_tensor(2), c.tensor(3), c.tensor(4),
                         c.bool_arg(5), 6, 7);
    return {o.y, fit_meta(c, 1, o.save_mean), fit_meta(c, 2, o.save_invstd), o.new_rm, o.new_rv};
  });
  add("native_batch_norm_backward", batch_norm_backward);
  add("native_group_norm", group_norm);
  add("native_group_norm_backward", group_norm_backward);
}

}  // namespace tpu::lower

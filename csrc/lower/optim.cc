// Fused optimizer steps: _fused_adam(w)_ and _fused_sgd_ (torch.optim's
// fused=True path). One program updates every parameter of the group, which
// is what makes the fused path worth having on a device.
//
// The lowerings are registered under the functional overloads; their results
// are the new values of the mutated lists in argument order (params, grads,
// then the state lists), which is also what the in-place forms write back.
// Hyper-parameters are runtime scalars: a learning-rate schedule never
// recompiles. Math follows PyTorch's CPU fused kernels: opmath per tensor,
// bias corrections from the step count, grads written back unscaled when a
// grad_scale is given, and nothing changes when found_inf is set.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

// The i-th tensor of list argument `a`, in the opmath of that list's dtype.
Value elem_of(Ctx& c, size_t a, size_t i, ElemType t) {
  return cast(c.b, c.tensors(a)[i], t);
}

// A runtime float argument that may also be a (0-dim) tensor (tensor_lr).
Value scalar_or_tensor(Ctx& c, size_t i, ElemType t) {
  if (c.arg(i).kind == Arg::kScalar) return c.scalar(i, t);
  return cast(c.b, c.b.reshape(c.tensor(i), {}), t);
}

// Optional 1-element tensor argument as a rank-0 value of type t.
std::optional<Value> opt_scalar_tensor(Ctx& c, size_t i, ElemType t) {
  auto v = c.opt_tensor(i);
  if (!v) return std::nullopt;
  return cast(c.b, c.b.reshape(*v, {}), t);
}

// Keeps `old` where found_inf is 1 (the step is skipped), else takes `upd`.
Value unless_inf(hlo::Builder& b, const std::optional<Value>& found_inf, Value upd, Value old) {
  if (!found_inf) return upd;
  Value skip = b.compare(*found_inf, b.constant_f(1, found_inf->elem()), Cmp::EQ);
  return b.select(skip, old, upd);
}

// _fused_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
//             lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
LowerFn adam(bool decoupled) {
  return [decoupled](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    auto params = c.tensors(0);
    const auto& dts = c.arg(0).dtypes;
    bool amsgrad = c.bool_arg(11), maximize = c.bool_arg(12);
    size_t n = params.size();
    std::vector<Value> p_out, g_out, m_out, v_out, vmax_out;
    for (size_t i = 0; i < n; ++i) {
      ElemType st = to_elem(dts[i]);
      ElemType t = opmath(st);
      auto dims = params[i].dims();
      auto S = [&](Value s) { return bcast(b, s, dims); };
      Value p0 = elem_of(c, 0, i, t), g0 = elem_of(c, 1, i, t);
      Value m0 = elem_of(c, 2, i, t), v0 = elem_of(c, 3, i, t);
      Value lr = scalar_or_tensor(c, 6, t), beta1 = c.scalar(7, t), beta2 = c.scalar(8, t);
      Value wd = c.scalar(9, t), eps = c.scalar(10, t);
      Value step = cast(b, b.reshape(c.tensors(5)[i], {}), t);
      auto scale = opt_scalar_tensor(c, 13, t), found = opt_scalar_tensor(c, 14, t);
      Value one = b.constant_f(1, t);

      Value g = scale ? b.div(g0, S(*scale)) : g0;
      Value grad_written = g;
      if (maximize) g = b.neg(g);
      Value p = p0;
      if (decoupled) p = b.sub(p, b.mul(p, S(b.mul(lr, wd))));
      else g = b.add(g, b.mul(p, S(wd)));
      Value m = b.add(b.mul(m0, S(beta1)), b.mul(g, S(b.sub(one, beta1))));
      Value v = b.add(b.mul(v0, S(beta2)), b.mul(b.mul(g, g), S(b.sub(one, beta2))));
      Value bc1 = b.sub(one, b.binary("power", beta1, step));
      Value bc2_sqrt = b.unary("sqrt", b.sub(one, b.binary("power", beta2, step)));
      Value step_size = b.div(lr, bc1);
      Value second = v;
      if (amsgrad) {
        Value vmax = b.max(elem_of(c, 4, i, t), v);
        vmax_out.push_back(cast(b, unless_inf(b, found, vmax, elem_of(c, 4, i, t)), st));
        second = vmax;
      }
      Value denom = b.add(b.div(b.unary("sqrt", second), S(bc2_sqrt)), S(eps));
      p = b.sub(p, b.mul(S(step_size), b.div(m, denom)));
      p_out.push_back(cast(b, unless_inf(b, found, p, p0), st));
      g_out.push_back(cast(b, unless_inf(b, found, grad_written, g0), to_elem(c.arg(1).dtypes[i])));
      m_out.push_back(cast(b, unless_inf(b, found, m, m0), to_elem(c.arg(2).dtypes[i])));
      v_out.push_back(cast(b, unless_inf(b, found, v, v0), to_elem(c.arg(3).dtypes[i])));
    }
    // Without amsgrad max_exp_avg_sqs is empty (or left untouched).
    if (!amsgrad) vmax_out = c.tensors(4);
    std::vector<Value> out = p_out;
    for (auto* l : {&g_out, &m_out, &v_out, &vmax_out}) out.insert(out.end(), l->begin(), l->end());
    return out;
  };
}

// _fused_sgd(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr,
//            dampening, nesterov, maximize, is_first_step, grad_scale, found_inf)
std::vector<Value> sgd(Ctx& c) {
  hlo::Builder& b = c.b;
  auto params = c.tensors(0);
  auto bufs = c.tensors(2);
  const auto& dts = c.arg(0).dtypes;
  bool nesterov = c.bool_arg(7), maximize = c.bool_arg(8), first = c.bool_arg(9);
  bool has_momentum = !bufs.empty();
  std::vector<Value> p_out, g_out, buf_out;
  for (size_t i = 0; i < params.size(); ++i) {
    ElemType st = to_elem(dts[i]);
    ElemType t = opmath(st);
    auto dims = params[i].dims();
    auto S = [&](Value s) { return bcast(b, s, dims); };
    Value p0 = elem_of(c, 0, i, t), g0 = elem_of(c, 1, i, t);
    Value wd = c.scalar(3, t), momentum = c.scalar(4, t), lr = scalar_or_tensor(c, 5, t);
    Value dampening = c.scalar(6, t);
    auto scale = opt_scalar_tensor(c, 10, t), found = opt_scalar_tensor(c, 11, t);

    Value g = scale ? b.div(g0, S(*scale)) : g0;
    Value grad_written = g;
    if (maximize) g = b.neg(g);
    g = b.add(g, b.mul(p0, S(wd)));
    if (has_momentum) {
      Value buf0 = elem_of(c, 2, i, t);
      Value buf = first ? g
                        : b.add(b.mul(buf0, S(momentum)),
                                b.mul(g, S(b.sub(b.constant_f(1, t), dampening))));
      buf_out.push_back(cast(b, unless_inf(b, found, buf, buf0), to_elem(c.arg(2).dtypes[i])));
      g = nesterov ? b.add(g, b.mul(buf, S(momentum))) : buf;
    }
    Value p = b.sub(p0, b.mul(g, S(lr)));
    p_out.push_back(cast(b, unless_inf(b, found, p, p0), st));
    g_out.push_back(cast(b, unless_inf(b, found, grad_written, g0), to_elem(c.arg(1).dtypes[i])));
  }
  std::vector<Value> out = p_out;
  out.insert(out.end(), g_out.begin(), g_out.end());
  out.insert(out.end(), buf_out.begin(), buf_out.end());
  return out;
}

}  // namespace

void register_optim() {
  add("_fused_adam", adam(false));
  add("_fused_adam.tensor_lr", adam(false));
  add("_fused_adamw", adam(true));
  add("_fused_adamw.tensor_lr", adam(true));
  add("_fused_sgd", sgd);
  add("_fused_sgd.tensor_lr", sgd);
}

}  // namespace tpu::lower

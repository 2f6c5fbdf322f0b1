// Pooling: max_pool{2,3}d_with_indices (+ backward), avg_pool{2,3}d
// (+ backward), _adaptive_avg_pool2d (+ backward). Inputs are [N, C, *sp] or
// [C, *sp] with 2 or 3 spatial dims.
//
// Windowed pools walk the kernel offsets: each offset is one strided slice of
// the padded input, so the running max keeps PyTorch's index rule (first
// maximum wins, NaN counts as a maximum) and the backward "folds" each
// offset's gradient back with an interior-padded pad. Adaptive average pooling
// of any sizes is two matrix products with constant averaging matrices.
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// Geometry over the last n (spatial) dims.
struct Window {
  int64_t n = 2;
  std::vector<int64_t> in, k, s, p, d, out;
  std::vector<int64_t> pad_hi;  // high-side padding so every window lies inside
};

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  // The last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// A size-n list from PyTorch's int[n] argument (empty -> dflt, one value -> repeated).
std::vector<int64_t> spread(std::vector<int64_t> v, int64_t n, const std::vector<int64_t>& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return std::vector<int64_t>(n, v[0]);
  return v;
}

Window window(Value x, int64_t n, const std::vector<int64_t>& k, const std::vector<int64_t>& s_in,
              const std::vector<int64_t>& p_in, const std::vector<int64_t>& d_in, bool ceil_mode) {
  Window w;
  w.n = n;
  w.k = spread(k, n, std::vector<int64_t>(n, 1));
  w.s = spread(s_in, n, w.k);
  w.p = spread(p_in, n, std::vector<int64_t>(n, 0));
  w.d = spread(d_in, n, std::vector<int64_t>(n, 1));
  for (int64_t i = 0; i < n; ++i) {
    w.in.push_back(x.dims()[x.rank() - n + i]);
    w.out.push_back(pool_out(w.in[i], w.k[i], w.s[i], w.p[i], w.d[i], ceil_mode));
    int64_t need = (w.out[i] - 1) * w.s[i] + w.d[i] * (w.k[i] - 1) + 1 - w.in[i] - w.p[i];
    w.pad_hi.push_back(std::max<int64_t>(need, 0));
  }
  return w;
}

std::vector<int64_t> out_dims(Value x, const Window& w) {
  std::vector<int64_t> d = x.dims();
  for (int64_t i = 0; i < w.n; ++i) d[d.size() - w.n + i] = w.out[i];
  return d;
}

// Every kernel offset (row-major over the spatial dims).
std::vector<std::vector<int64_t>> offsets(const Window& w) {
  std::vector<std::vector<int64_t>> all = {{}};
  for (int64_t i = 0; i < w.n; ++i) {
    std::vector<std::vector<int64_t>> next;
    for (const auto& o : all)
      for (int64_t j = 0; j < w.k[i]; ++j) {
        auto e = o;
        e.push_back(j);
        next.push_back(e);
      }
    all = next;
  }
  return all;
}

// Pads the spatial dims of x with `v` by the window's padding.
Value pad_sp(hlo::Builder& b, Value x, Value v, const Window& w) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0), in(x.rank(), 0);
  for (int64_t i = 0; i < w.n; ++i) {
    lo[x.rank() - w.n + i] = w.p[i];
    hi[x.rank() - w.n + i] = w.pad_hi[i];
  }
  return b.pad(x, v, lo, hi, in);
}

// The strided slice of padded xp that kernel offset `o` sees: [..., *out].
Value offset_slice(hlo::Builder& b, Value xp, const Window& w, const std::vector<int64_t>& o) {
  int64_t r = xp.rank();
  std::vector<int64_t> start(r, 0), limit = xp.dims(), step(r, 1);
  for (int64_t a = 0; a < w.n; ++a) {
    int64_t off = o[a] * w.d[a];
    start[r - w.n + a] = off;
    limit[r - w.n + a] = off + (w.out[a] - 1) * w.s[a] + 1;
    step[r - w.n + a] = w.s[a];
  }
  return b.slice(xp, start, limit, step);
}

// Adjoint of offset_slice + pad_sp: places g [..., *out] at the input
// positions kernel offset `o` read, in an unpadded [..., *in] result.
Value fold(hlo::Builder& b, Value g, const Window& w, const std::vector<int64_t>& o) {
  int64_t r = g.rank();
  std::vector<int64_t> lo(r, 0), hi(r, 0), in(r, 0);
  for (int64_t a = 0; a < w.n; ++a) {
    int64_t padded = w.in[a] + w.p[a] + w.pad_hi[a], off = o[a] * w.d[a];
    lo[r - w.n + a] = off;
    in[r - w.n + a] = w.s[a] - 1;
    hi[r - w.n + a] = padded - off - ((w.out[a] - 1) * w.s[a] + 1);
  }
  Value full = b.pad(g, b.constant_f(0, g.elem()), lo, hi, in);
  std::vector<int64_t> start(r, 0), limit = full.dims(), step(r, 1);
  for (int64_t a = 0; a < w.n; ++a) {
    start[r - w.n + a] = w.p[a];
    limit[r - w.n + a] = w.p[a] + w.in[a];
  }
  return b.slice(full, start, limit, step);
}

// Flat row-major index of every spatial input position, padded with -1.
Value plane_index(hlo::Builder& b, const Window& w) {
  hlo::TensorType t{ElemType::S64, w.in};
  Value idx = b.iota(t, 0);
  for (int64_t a = 1; a < w.n; ++a)
    idx = b.add(b.mul(idx, b.splat_i(w.in[a], t)), b.iota(t, a));
  return b.pad(idx, b.constant_i(-1, ElemType::S64), w.p, w.pad_hi, std::vector<int64_t>(w.n, 0));
}

// max_pool{n}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
LowerFn max_pool(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    Window w = window(x, n, c.ints(1), c.ints(2), c.ints(3), c.ints(4), c.bool_arg(5));
    auto od = out_dims(x, w);
    Value xp = pad_sp(b, x, extreme_value(b, x.elem(), false), w);
    Value ip = plane_index(b, w);
    Value best = b.broadcast_to(extreme_value(b, x.elem(), false), od);
    Value bi = b.splat_i(-1, {ElemType::S64, od});
    Value have = b.splat_i(0, {ElemType::PRED, od});
    for (const auto& o : offsets(w)) {
      Value cand = offset_slice(b, xp, w, o);
      Value ci = b.broadcast_to(offset_slice(b, ip, w, o), od);
      Value valid = b.compare(ci, zeros_like(b, ci), Cmp::GE);
      Value better = b.compare(cand, best, Cmp::GT);
      if (hlo::is_float(x.elem())) better = b.binary("or", better, b.compare(cand, cand, Cmp::NE));
      Value upd = b.binary("and", valid, b.binary("or", b.unary("not", have), better));
      best = b.select(upd, cand, best);
      bi = b.select(upd, ci, bi);
      have = b.binary("or", have, valid);
    }
    return {best, bi};
  };
}

// max_pool{n}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
//                                    dilation, ceil_mode, indices)
LowerFn max_pool_backward(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(1);
    ElemType t = opmath(x.elem());
    Window w = window(x, n, c.ints(2), c.ints(3), c.ints(4), c.ints(5), c.bool_arg(6));
    auto od = out_dims(x, w);
    Value g = cast(b, c.tensor(0), t);
    Value idx = cast(b, c.tensor(7), ElemType::S64);
    Value ip = plane_index(b, w);
    Value acc = b.splat_f(0, {t, x.dims()});
    for (const auto& o : offsets(w)) {
      Value ci = b.broadcast_to(offset_slice(b, ip, w, o), od);
      Value part = b.select(b.compare(ci, idx, Cmp::EQ), g, zeros_like(b, g));
      acc = b.add(acc, fold(b, part, w, o));
    }
    return {acc};
  };
}

// Per-output divisor of avg_pool, shape [*out] (host-computed: it is static).
Value avg_divisor(hlo::Builder& b, const Window& w, bool count_pad, std::optional<int64_t> over,
                  ElemType t) {
  int64_t total = numel_of(w.out);
  std::vector<double> v;
  for (int64_t flat = 0; flat < total; ++flat) {
    if (over) {
      v.push_back(static_cast<double>(*over));
      continue;
    }
    int64_t rem = flat, pool = 1, inside = 1;
    std::vector<int64_t> pos(w.n);
    for (int64_t a = w.n - 1; a >= 0; --a) {
      pos[a] = rem % w.out[a];
      rem /= w.out[a];
    }
    for (int64_t a = 0; a < w.n; ++a) {
      int64_t st = pos[a] * w.s[a] - w.p[a];
      int64_t en = std::min(st + w.k[a], w.in[a] + w.p[a]);
      pool *= en - st;
      inside *= std::min(en, w.in[a]) - std::max<int64_t>(st, 0);
    }
    v.push_back(static_cast<double>(count_pad ? pool : inside));
  }
  return b.dense_f(v, {t, w.out});
}

// avg_pool{n}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
LowerFn avg_pool(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value x = cast(b, c.tensor(0), t);
    Window w = window(x, n, c.ints(1), c.ints(2), c.ints(3), {}, c.bool_arg(4));
    auto od = out_dims(x, w);
    Value xp = pad_sp(b, x, b.constant_f(0, t), w);
    Value acc = b.splat_f(0, {t, od});
    for (const auto& o : offsets(w)) acc = b.add(acc, offset_slice(b, xp, w, o));
    Value div = b.broadcast_to(avg_divisor(b, w, c.bool_arg(5), c.opt_int(6), t), od);
    return {b.div(acc, div)};
  };
}

// avg_pool{n}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
//                       count_include_pad, divisor_override)
LowerFn avg_pool_backward(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(1);
    ElemType t = opmath(x.elem());
    Window w = window(x, n, c.ints(2), c.ints(3), c.ints(4), {}, c.bool_arg(5));
    auto od = out_dims(x, w);
    Value g = b.div(cast(b, c.tensor(0), t),
                    b.broadcast_to(avg_divisor(b, w, c.bool_arg(6), c.opt_int(7), t), od));
    Value acc = b.splat_f(0, {t, x.dims()});
    for (const auto& o : offsets(w)) acc = b.add(acc, fold(b, g, w, o));
    return {acc};
  };
}

// [out, in] matrix averaging PyTorch's adaptive bins:
// bin i covers [floor(i*in/out), ceil((i+1)*in/out)).
Value adaptive_matrix(hlo::Builder& b, int64_t in, int64_t out, ElemType t) {
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    int64_t s = (i * in) / out, e = ((i + 1) * in + out - 1) / out;
    for (int64_t k = s; k < e; ++k) v[static_cast<size_t>(i * in + k)] = 1.0 / static_cast<double>(e - s);
  }
  return b.dense_f(v, {t, {out, in}});
}


}  // namespace

void register_pooling() {
  for (int64_t n : {2, 3}) {
    std::string d = std::to_string(n) + "d";
    add("max_pool" + d + "_with_indices", max_pool(n));
    add("max_pool" + d + "_with_indices_backward", max_pool_backward(n));
    add("avg_pool" + d, avg_pool(n));
    add("avg_pool" + d + "_backward", avg_pool_backward(n));
  }
  // _adaptive_avg_pool2d(self, output_size)
  add("_adaptive_avg_pool2d", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value x = cast(b, c.tensor(0), t);
    auto os = c.ints(1);
    int64_t h = x.dims()[x.rank() - 2], w = x.dims()[x.rank() - 1];
    int64_t bsz = numel_of(leading_dims(x));
    Value y = apply_hw(b, b.reshape(x, {bsz, h, w}), adaptive_matrix(b, h, os[0], t),
                             adaptive_matrix(b, w, os[1], t));
    auto od = leading_dims(x);
    od.push_back(os[0]);
    od.push_back(os[1]);
    return {b.reshape(y, od)};
  });
  // _adaptive_avg_pool2d_backward(grad_output, self)
  add("_adaptive_avg_pool2d_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(1);
    ElemType t = opmath(x.elem());
    Value g = cast(b, c.tensor(0), t);
    int64_t h = x.dims()[x.rank() - 2], w = x.dims()[x.rank() - 1];
    int64_t oh = g.dims()[g.rank() - 2], ow = g.dims()[g.rank() - 1];
    int64_t bsz = numel_of(leading_dims(x));
    // The adjoint: A_h^T g A_w, i.e. the same products with transposed matrices.
    Value ah = b.transpose(adaptive_matrix(b, h, oh, t), {1, 0});
    Value aw = b.transpose(adaptive_matrix(b, w, ow, t), {1, 0});
    Value y = apply_hw(b, b.reshape(g, {bsz, oh, ow}), ah, aw);
    return {b.reshape(y, x.dims())};
  });
}

}  // namespace tpu::lower

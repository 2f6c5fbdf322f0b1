// grid_sampler_2d and grid_sampler_2d_backward: bilinear, nearest and bicubic
// sampling with zeros / border / reflection padding, align_corners either way.
//
// A sample is a weighted sum of "taps" (1, 4 or 16 input pixels). Each axis
// gives its own taps (position, in-bounds flag, weight and the weight's
// derivative along that axis); a 2-d tap is a pair of them. The forward
// gathers the taps' pixels as rows of the [N*H*W, C] channels-last image; the
// backward scatter-adds the weighted gradient into the same rows and, for the
// grid, sums pixel * d(weight)/d(coordinate) * grad over the channels, then
// applies the chain rule through the padding transform and the
// [-1, 1] -> pixel mapping.
#include <cmath>

#include "lower/rows.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

enum Interp { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding { kZeros = 0, kBorder = 1, kReflection = 2 };

struct Opts {
  int64_t interp, padding;
  bool align;
};

Value f(hlo::Builder& b, double v, Value like) { return scalar_like(b, v, like); }

// Grid value in [-1, 1] -> pixel coordinate; *scale = d coordinate / d grid.
Value unnormalize(hlo::Builder& b, Value g, int64_t size, bool align, double* scale) {
  Value one = f(b, 1, g);
  if (align) {
    *scale = static_cast<double>(size - 1) / 2;
    return b.mul(b.div(b.add(g, one), f(b, 2, g)), f(b, static_cast<double>(size - 1), g));
  }
  *scale = static_cast<double>(size) / 2;
  return b.div(b.sub(b.mul(b.add(g, one), f(b, static_cast<double>(size), g)), one), f(b, 2, g));
}

// Clamps to [0, size-1]; the gradient is 1 strictly inside, 0 on and beyond
// the borders (PyTorch treats the borders as out of bounds for it).
Value clip(hlo::Builder& b, Value x, int64_t size, Value* grad) {
  Value hi = f(b, static_cast<double>(size - 1), x);
  if (grad) {
    Value inside = b.binary("and", b.compare(x, zeros_like(b, x), Cmp::GT), b.compare(x, hi, Cmp::LT));
    *grad = b.convert(inside, x.elem());
  }
  return b.clamp(zeros_like(b, x), x, hi);
}

// Mirrors x into the reflection range ([0, size-1] with align_corners, else
// [-0.5, size-0.5]); the gradient is +-1 by the parity of the reflections.
Value reflect(hlo::Builder& b, Value x, int64_t size, bool align, Value* grad) {
  double span2 = align ? 2.0 * static_cast<double>(size - 1) : 2.0 * static_cast<double>(size);
  double lower = align ? 0.0 : -0.5;
  if (span2 == 0) {
    if (grad) *grad = zeros_like(b, x);
    return zeros_like(b, x);
  }
  Value rel = b.sub(x, f(b, lower, x));
  Value a = b.unary("abs", rel);
  Value periods = b.unary("floor", b.div(a, f(b, span2, x)));
  Value extra = b.sub(a, b.mul(periods, f(b, span2, x)));
  Value mirrored = b.sub(f(b, span2, x), extra);
  Value flip = b.compare(extra, mirrored, Cmp::GT);
  if (grad) {
    Value neg = b.compare(rel, zeros_like(b, x), Cmp::LT);
    *grad = b.select(b.binary("xor", flip, neg), f(b, -1, x), f(b, 1, x));
  }
  return b.add(b.select(flip, mirrored, extra), f(b, lower, x));
}

// The padding transform of a pixel coordinate (and its derivative).
Value pad_coord(hlo::Builder& b, Value x, int64_t size, const Opts& o, Value* grad) {
  if (o.padding == kZeros) {
    if (grad) *grad = f(b, 1, x);
    return x;
  }
  if (o.padding == kBorder) return clip(b, x, size, grad);
  Value g1, g2;
  Value r = reflect(b, x, size, o.align, grad ? &g1 : nullptr);
  r = clip(b, r, size, grad ? &g2 : nullptr);
  if (grad) *grad = b.mul(g1, g2);
  return r;
}

// One axis' contribution to a tap.
struct AxisTap {
  Value pos;    // integer-valued float, clamped into [0, size-1]
  Value valid;  // the unclamped position was inside the image
  Value w, dw;  // weight and d weight / d coordinate
};

AxisTap make_tap(hlo::Builder& b, Value pos, int64_t size, Value w, Value dw) {
  Value hi = f(b, static_cast<double>(size - 1), pos);
  Value valid = b.binary("and", b.compare(pos, zeros_like(b, pos), Cmp::GE), b.compare(pos, hi, Cmp::LE));
  return {b.clamp(zeros_like(b, pos), pos, hi), valid, w, dw};
}

// Cubic convolution weights (A = -0.75) and their derivatives in t.
constexpr double kA = -0.75;
Value cubic1(hlo::Builder& b, Value x) {  // |x| <= 1
  Value v = b.sub(b.mul(f(b, kA + 2, x), x), f(b, kA + 3, x));
  return b.add(b.mul(b.mul(v, x), x), f(b, 1, x));
}
Value cubic2(hlo::Builder& b, Value x) {  // 1 < |x| < 2
  Value v = b.sub(b.mul(f(b, kA, x), x), f(b, 5 * kA, x));
  v = b.add(b.mul(v, x), f(b, 8 * kA, x));
  return b.sub(b.mul(v, x), f(b, 4 * kA, x));
}
Value dcubic1(hlo::Builder& b, Value x) {
  return b.mul(b.sub(b.mul(f(b, 3 * (kA + 2), x), x), f(b, 2 * (kA + 3), x)), x);
}
Value dcubic2(hlo::Builder& b, Value x) {
  return b.add(b.mul(b.sub(b.mul(f(b, 3 * kA, x), x), f(b, 10 * kA, x)), x), f(b, 8 * kA, x));
}

// The taps along one axis for grid values g; *mult = d coordinate / d grid.
std::vector<AxisTap> axis_taps(hlo::Builder& b, Value g, int64_t size, const Opts& o, Value* mult) {
  double scale = 0;
  Value x = unnormalize(b, g, size, o.align, &scale);
  std::vector<AxisTap> taps;
  if (o.interp == kBicubic) {
    // The padding transform applies to each tap's position, not to x, and
    // contributes nothing to the grid's gradient.
    *mult = f(b, scale, x);
    Value x0 = b.unary("floor", x);
    Value t = b.sub(x, x0), one = f(b, 1, x), two = f(b, 2, x);
    Value w[4] = {cubic2(b, b.add(t, one)), cubic1(b, t), cubic1(b, b.sub(one, t)),
                  cubic2(b, b.sub(two, t))};
    Value dw[4] = {dcubic2(b, b.add(t, one)), dcubic1(b, t), b.neg(dcubic1(b, b.sub(one, t))),
                   b.neg(dcubic2(b, b.sub(two, t)))};
    for (int k = 0; k < 4; ++k) {
      Value p = pad_coord(b, b.add(x0, f(b, k - 1, x)), size, o, nullptr);
      taps.push_back(make_tap(b, b.unary("floor", p), size, w[k], dw[k]));
    }
    return taps;
  }
  Value pg;
  x = pad_coord(b, x, size, o, &pg);
  *mult = b.mul(pg, f(b, scale, x));
  if (o.interp == kNearest) {
    taps.push_back(make_tap(b, b.unary("round_nearest_even", x), size, f(b, 1, x), zeros_like(b, x)));
    return taps;
  }
  Value x0 = b.unary("floor", x);
  Value t = b.sub(x, x0), one = f(b, 1, x);
  taps.push_back(make_tap(b, x0, size, b.sub(one, t), b.neg(one)));
  taps.push_back(make_tap(b, b.add(x0, one), size, t, one));
  return taps;
}

struct Plan {
  int64_t n, c, h, w, oh, ow;
  std::vector<AxisTap> xs, ys;
  Value mult_x, mult_y;
};

Opts opts(const Ctx& c, size_t first) {
  Opts o{c.int_arg(first), c.int_arg(first + 1), c.bool_arg(first + 2)};
  TORCH_CHECK(o.interp >= 0 && o.interp <= 2, "grid_sampler_2d: unknown interpolation mode ", o.interp);
  TORCH_CHECK(o.padding >= 0 && o.padding <= 2, "grid_sampler_2d: unknown padding mode ", o.padding);
  return o;
}

Plan plan(hlo::Builder& b, Value input, Value grid, const Opts& o) {
  Plan p;
  p.n = input.dims()[0];
  p.c = input.dims()[1];
  p.h = input.dims()[2];
  p.w = input.dims()[3];
  p.oh = grid.dims()[1];
  p.ow = grid.dims()[2];
  std::vector<int64_t> od = {p.n, p.oh, p.ow};
  Value gx = b.reshape(b.slice(grid, {0, 0, 0, 0}, {p.n, p.oh, p.ow, 1}, {1, 1, 1, 1}), od);
  Value gy = b.reshape(b.slice(grid, {0, 0, 0, 1}, {p.n, p.oh, p.ow, 2}, {1, 1, 1, 1}), od);
  p.xs = axis_taps(b, gx, p.w, o, &p.mult_x);
  p.ys = axis_taps(b, gy, p.h, o, &p.mult_y);
  return p;
}

// Row of the [N*H*W, C] image for a tap pair, flattened to [N*OH*OW].
Value flat_index(hlo::Builder& b, const Plan& p, const AxisTap& tx, const AxisTap& ty) {
  hlo::TensorType t{ElemType::S64, {p.n, p.oh, p.ow}};
  Value idx = b.mul(b.iota(t, 0), b.splat_i(p.h, t));
  idx = b.mul(b.add(idx, b.convert(ty.pos, ElemType::S64)), b.splat_i(p.w, t));
  idx = b.add(idx, b.convert(tx.pos, ElemType::S64));
  return b.reshape(idx, {p.n * p.oh * p.ow});
}

// [N, OH, OW] -> [N, OH, OW, C].
Value per_channel(hlo::Builder& b, Value v, int64_t c) {
  auto d = v.dims();
  d.push_back(c);
  return b.broadcast_in_dim(v, d, {0, 1, 2});
}

// Channels-last rows of the image: [N*H*W, C].
Value image_rows(hlo::Builder& b, Value input) {
  const auto& d = input.dims();
  return b.reshape(b.transpose(input, {0, 2, 3, 1}), {d[0] * d[2] * d[3], d[1]});
}

// The tap's pixels, zero where the tap is outside the image: [N, OH, OW, C].
Value tap_pixels(hlo::Builder& b, const Plan& p, Value img, const AxisTap& tx, const AxisTap& ty,
                 Value valid) {
  Value v = b.reshape(rows::take(b, img, flat_index(b, p, tx, ty)), {p.n, p.oh, p.ow, p.c});
  return b.select(per_channel(b, valid, p.c), v, zeros_like(b, v));
}

// grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> forward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value input = cast(b, c.tensor(0), t), grid = cast(b, c.tensor(1), t);
  Opts o = opts(c, 2);
  Plan p = plan(b, input, grid, o);
  Value out = b.splat_f(0, {t, {p.n, p.oh, p.ow, p.c}});
  if (p.n * p.c * p.oh * p.ow == 0 || p.h * p.w == 0) return {b.transpose(out, {0, 3, 1, 2})};
  Value img = image_rows(b, input);
  for (const auto& ty : p.ys)
    for (const auto& tx : p.xs) {
      Value valid = b.binary("and", tx.valid, ty.valid);
      Value v = tap_pixels(b, p, img, tx, ty, valid);
      out = b.add(out, b.mul(v, per_channel(b, b.mul(tx.w, ty.w), p.c)));
    }
  return {b.transpose(out, {0, 3, 1, 2})};
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode,
//                          padding_mode, align_corners, output_mask)
std::vector<Value> backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value input = cast(b, c.tensor(1), t), grid = cast(b, c.tensor(2), t);
  Value go = b.transpose(cast(b, c.tensor(0), t), {0, 2, 3, 1});  // [N, OH, OW, C]
  Opts o = opts(c, 3);
  Plan p = plan(b, input, grid, o);
  Value gin = b.splat_f(0, {t, {p.n * p.h * p.w, p.c}});
  Value ggrid = b.splat_f(0, {t, grid.dims()});
  if (p.n * p.c * p.oh * p.ow == 0 || p.h * p.w == 0)
    return {b.reshape(b.splat_f(0, {t, input.dims()}), input.dims()), ggrid};
  Value img = image_rows(b, input);
  std::vector<int64_t> od = {p.n, p.oh, p.ow};
  Value gx = b.splat_f(0, {t, od}), gy = b.splat_f(0, {t, od});
  bool grid_grad = o.interp != kNearest;
  for (const auto& ty : p.ys)
    for (const auto& tx : p.xs) {
      Value valid = b.binary("and", tx.valid, ty.valid);
      Value vmask = per_channel(b, valid, p.c);
      Value upd = b.mul(go, per_channel(b, b.mul(tx.w, ty.w), p.c));
      upd = b.select(vmask, upd, zeros_like(b, upd));
      gin = rows::scatter_add(b, gin, flat_index(b, p, tx, ty),
                              b.reshape(upd, {p.n * p.oh * p.ow, p.c}));
      if (!grid_grad) continue;
      // sum over channels of pixel * grad_output
      Value pg = reduce_sum(b, b.mul(tap_pixels(b, p, img, tx, ty, valid), go), {3}, false);
      gx = b.add(gx, b.mul(pg, b.mul(tx.dw, ty.w)));
      gy = b.add(gy, b.mul(pg, b.mul(tx.w, ty.dw)));
    }
  if (grid_grad) {
    gx = b.reshape(b.mul(gx, p.mult_x), {p.n, p.oh, p.ow, 1});
    gy = b.reshape(b.mul(gy, p.mult_y), {p.n, p.oh, p.ow, 1});
    ggrid = b.concatenate({gx, gy}, 3);
  }
  gin = b.transpose(b.reshape(gin, {p.n, p.h, p.w, p.c}), {0, 3, 1, 2});
  return {gin, ggrid};
}

}  // namespace

void register_grid_sample() {
  add("grid_sampler_2d", forward);
  add("grid_sampler_2d_backward", backward);
}

}  // namespace tpu::lower

// grid_sampler_{2,3}d and their backward ops: bilinear (trilinear in 3-d),
// nearest and (2-d only, as in PyTorch) bicubic sampling with zeros / border /
// reflection padding, align_corners either way.
//
// A sample is a weighted sum of "taps" (1, 4, 8 or 16 input pixels). Each
// axis gives its own taps (position, in-bounds flag, weight and the weight's
// derivative along that axis); a tap is one of each axis'. The forward
// gathers the taps' pixels as rows of the [N*prod(sp), C] channels-last image; the
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

// The sampling of one call: sizes and, per spatial axis of the input (in
// input order: [D,] H, W), its taps and d coordinate / d grid.
struct Plan {
  int64_t n = 0, c = 0, nsp = 0;
  std::vector<int64_t> in, out;  // spatial sizes of input and output
  std::vector<std::vector<AxisTap>> taps;
  std::vector<Value> mult;
  int64_t out_count() const { return n * numel_of(out); }
  std::vector<int64_t> out_dims() const {  // [N, *out]
    std::vector<int64_t> d = {n};
    d.insert(d.end(), out.begin(), out.end());
    return d;
  }
};

Opts opts(const Ctx& c, size_t first, int64_t nsp) {
  Opts o{c.int_arg(first), c.int_arg(first + 1), c.bool_arg(first + 2)};
  TORCH_CHECK(o.interp >= 0 && o.interp <= 2, "grid_sampler: unknown interpolation mode ", o.interp);
  TORCH_CHECK(o.padding >= 0 && o.padding <= 2, "grid_sampler: unknown padding mode ", o.padding);
  TORCH_CHECK(!(nsp == 3 && o.interp == kBicubic),
              "grid_sampler_3d: bicubic interpolation only supports 4D input");
  return o;
}

// input [N, C, *in], grid [N, *out, nsp] whose last dim lists x (the last
// input axis) first.
Plan plan(hlo::Builder& b, Value input, Value grid, const Opts& o) {
  Plan p;
  p.nsp = input.rank() - 2;
  p.n = input.dims()[0];
  p.c = input.dims()[1];
  p.in.assign(input.dims().begin() + 2, input.dims().end());
  p.out.assign(grid.dims().begin() + 1, grid.dims().end() - 1);
  p.taps.resize(p.nsp);
  p.mult.resize(p.nsp);
  int64_t r = grid.rank();
  for (int64_t a = 0; a < p.nsp; ++a) {
    int64_t comp = p.nsp - 1 - a;  // grid component of input axis a
    std::vector<int64_t> lo(r, 0), hi = grid.dims(), st(r, 1);
    lo[r - 1] = comp;
    hi[r - 1] = comp + 1;
    Value g = b.reshape(b.slice(grid, lo, hi, st), p.out_dims());
    p.taps[a] = axis_taps(b, g, p.in[a], o, &p.mult[a]);
  }
  return p;
}

// One combination of per-axis taps.
struct Tap {
  Value flat;   // row of the [N * prod(in), C] image, [N * prod(out)]
  Value valid;  // [N, *out]
  Value w;      // product of the axis weights
  std::vector<Value> dw;  // d w / d coordinate per axis
};

std::vector<Tap> taps(hlo::Builder& b, const Plan& p) {
  std::vector<std::vector<const AxisTap*>> combos = {{}};
  for (int64_t a = 0; a < p.nsp; ++a) {
    std::vector<std::vector<const AxisTap*>> next;
    for (const auto& cmb : combos)
      for (const auto& t : p.taps[a]) {
        auto e = cmb;
        e.push_back(&t);
        next.push_back(e);
      }
    combos = next;
  }
  hlo::TensorType it{ElemType::S64, p.out_dims()};
  std::vector<Tap> out;
  for (const auto& cmb : combos) {
    Tap t;
    Value idx = b.iota(it, 0);
    for (int64_t a = 0; a < p.nsp; ++a)
      idx = b.add(b.mul(idx, b.splat_i(p.in[a], it)), b.convert(cmb[a]->pos, ElemType::S64));
    t.flat = b.reshape(idx, {p.out_count()});
    t.valid = cmb[0]->valid;
    t.w = cmb[0]->w;
    for (int64_t a = 1; a < p.nsp; ++a) {
      t.valid = b.binary("and", t.valid, cmb[a]->valid);
      t.w = b.mul(t.w, cmb[a]->w);
    }
    for (int64_t a = 0; a < p.nsp; ++a) {
      Value d = cmb[a]->dw;
      for (int64_t o = 0; o < p.nsp; ++o)
        if (o != a) d = b.mul(d, cmb[o]->w);
      t.dw.push_back(d);
    }
    out.push_back(t);
  }
  return out;
}

// [N, *out] -> [N, *out, C].
Value per_channel(hlo::Builder& b, Value v, int64_t c) {
  auto d = v.dims();
  d.push_back(c);
  return b.broadcast_in_dim(v, d, iota_dims(0, v.rank()));
}

// Moves dim 1 (channels) last, or back.
std::vector<int64_t> to_channels_last(int64_t rank) {
  std::vector<int64_t> perm = {0};
  for (int64_t d = 2; d < rank; ++d) perm.push_back(d);
  perm.push_back(1);
  return perm;
}
std::vector<int64_t> to_channels_first(int64_t rank) {
  std::vector<int64_t> perm = {0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d) perm.push_back(d);
  return perm;
}

// The tap's pixels, zero where the tap is outside the image: [N, *out, C].
Value tap_pixels(hlo::Builder& b, const Plan& p, Value img, const Tap& t) {
  auto d = p.out_dims();
  d.push_back(p.c);
  Value v = b.reshape(rows::take(b, img, t.flat), d);
  return b.select(per_channel(b, t.valid, p.c), v, zeros_like(b, v));
}

bool empty(const Plan& p) { return p.out_count() * p.c == 0 || numel_of(p.in) == 0; }

// grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> forward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value input = cast(b, c.tensor(0), t), grid = cast(b, c.tensor(1), t);
  Opts o = opts(c, 2, input.rank() - 2);
  Plan p = plan(b, input, grid, o);
  auto od = p.out_dims();
  od.push_back(p.c);
  Value out = b.splat_f(0, {t, od});
  if (!empty(p)) {
    Value img = b.reshape(b.transpose(input, to_channels_last(input.rank())), {p.n * numel_of(p.in), p.c});
    for (const auto& tp : taps(b, p))
      out = b.add(out, b.mul(tap_pixels(b, p, img, tp), per_channel(b, tp.w, p.c)));
  }
  return {b.transpose(out, to_channels_first(out.rank()))};
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode,
//                              padding_mode, align_corners, output_mask)
std::vector<Value> backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value input = cast(b, c.tensor(1), t), grid = cast(b, c.tensor(2), t);
  int64_t rank = input.rank();
  Value go = b.transpose(cast(b, c.tensor(0), t), to_channels_last(rank));  // [N, *out, C]
  Opts o = opts(c, 3, rank - 2);
  Plan p = plan(b, input, grid, o);
  Value ggrid = b.splat_f(0, {t, grid.dims()});
  if (empty(p)) return {b.splat_f(0, {t, input.dims()}), ggrid};
  int64_t rows_in = p.n * numel_of(p.in);
  Value img = b.reshape(b.transpose(input, to_channels_last(rank)), {rows_in, p.c});
  Value gin = b.splat_f(0, {t, {rows_in, p.c}});
  bool grid_grad = o.interp != kNearest;
  std::vector<Value> gc(p.nsp, b.splat_f(0, {t, p.out_dims()}));
  for (const auto& tp : taps(b, p)) {
    Value upd = b.mul(go, per_channel(b, tp.w, p.c));
    upd = b.select(per_channel(b, tp.valid, p.c), upd, zeros_like(b, upd));
    gin = rows::scatter_add(b, gin, tp.flat, b.reshape(upd, {p.out_count(), p.c}));
    if (!grid_grad) continue;
    // sum over channels of pixel * grad_output
    Value pg = reduce_sum(b, b.mul(tap_pixels(b, p, img, tp), go), {rank - 1}, false);
    for (int64_t a = 0; a < p.nsp; ++a) gc[a] = b.add(gc[a], b.mul(pg, tp.dw[a]));
  }
  if (grid_grad) {
    auto cd = p.out_dims();
    cd.push_back(1);
    std::vector<Value> comps;  // grid order: x (last input axis) first
    for (int64_t a = p.nsp - 1; a >= 0; --a) comps.push_back(b.reshape(b.mul(gc[a], p.mult[a]), cd));
    ggrid = b.concatenate(comps, rank - 1);
  }
  std::vector<int64_t> cl = {p.n};
  cl.insert(cl.end(), p.in.begin(), p.in.end());
  cl.push_back(p.c);
  gin = b.transpose(b.reshape(gin, cl), to_channels_first(rank));
  return {gin, ggrid};
}

}  // namespace

void register_grid_sample() {
  for (const char* d : {"2d", "3d"}) {
    add(std::string("grid_sampler_") + d, forward);
    add(std::string("grid_sampler_") + d + "_backward", backward);
  }
}

}  // namespace tpu::lower

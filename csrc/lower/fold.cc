// im2col / col2im (nn.functional.unfold / fold). Each is the other's
// gradient, so autograd needs nothing else.
//
// im2col takes, for every kernel offset (i, j), one strided slice of the
// zero-padded image; the slices stack into the column dim as
// channel * kh * kw + i * kw + j. col2im is the adjoint: every offset's block
// is spread back with an interior-padded pad and the blocks are summed, then
// the padding is cropped.
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

struct Geometry {
  int64_t kh, kw, dh, dw, ph, pw, sh, sw;
  int64_t h, w;    // image size
  int64_t oh, ow;  // block positions per axis
};

// (kernel_size, dilation, padding, stride) at args a..a+3, image size h x w.
Geometry geometry(const Ctx& c, size_t a, int64_t h, int64_t w) {
  auto k = c.ints(a), d = c.ints(a + 1), p = c.ints(a + 2), s = c.ints(a + 3);
  TORCH_CHECK(k.size() == 2 && d.size() == 2 && p.size() == 2 && s.size() == 2,
              "im2col/col2im: kernel_size, dilation, padding and stride must have 2 elements");
  Geometry g{k[0], k[1], d[0], d[1], p[0], p[1], s[0], s[1], h, w, 0, 0};
  g.oh = (h + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (w + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  return g;
}

// x [N, C, H, W] -> [N, C * kh * kw, oh * ow].
Value im2col4(hlo::Builder& b, Value x, const Geometry& g) {
  int64_t n = x.dims()[0], ch = x.dims()[1];
  Value xp = b.pad(x, b.constant_f(0, x.elem()), {0, 0, g.ph, g.pw}, {0, 0, g.ph, g.pw},
                   {0, 0, 0, 0});
  std::vector<Value> parts;
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      int64_t y0 = i * g.dh, x0 = j * g.dw;
      Value s = b.slice(xp, {0, 0, y0, x0},
                        {n, ch, y0 + (g.oh - 1) * g.sh + 1, x0 + (g.ow - 1) * g.sw + 1},
                        {1, 1, g.sh, g.sw});
      parts.push_back(b.reshape(s, {n, ch, 1, g.oh * g.ow}));
    }
  Value cols = parts.size() == 1 ? parts[0] : b.concatenate(parts, 2);
  return b.reshape(cols, {n, ch * g.kh * g.kw, g.oh * g.ow});
}

// cols [N, C * kh * kw, oh * ow] -> [N, C, H, W], overlapping blocks summed.
Value col2im4(hlo::Builder& b, Value cols, const Geometry& g) {
  int64_t n = cols.dims()[0], ch = cols.dims()[1] / (g.kh * g.kw);
  Value blocks = b.reshape(cols, {n, ch, g.kh * g.kw, g.oh, g.ow});
  int64_t hp = g.h + 2 * g.ph, wp = g.w + 2 * g.pw;
  Value zero = b.constant_f(0, cols.elem());
  Value acc = b.splat_f(0, {cols.elem(), {n, ch, hp, wp}});
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      int64_t k = i * g.kw + j, y0 = i * g.dh, x0 = j * g.dw;
      Value blk = b.reshape(b.slice(blocks, {0, 0, k, 0, 0}, {n, ch, k + 1, g.oh, g.ow},
                                    {1, 1, 1, 1, 1}),
                            {n, ch, g.oh, g.ow});
      // Spread positions `stride` apart starting at the offset; the padded
      // image may extend past the last block (unused rows/cols).
      int64_t hi_h = hp - y0 - ((g.oh - 1) * g.sh + 1), hi_w = wp - x0 - ((g.ow - 1) * g.sw + 1);
      acc = b.add(acc, b.pad(blk, zero, {0, 0, y0, x0}, {0, 0, hi_h, hi_w},
                             {0, 0, g.sh - 1, g.sw - 1}));
    }
  return b.slice(acc, {0, 0, g.ph, g.pw}, {n, ch, g.ph + g.h, g.pw + g.w}, {1, 1, 1, 1});
}

// im2col(self, kernel_size, dilation, padding, stride); self [N, C, H, W] or [C, H, W].
std::vector<Value> im2col(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
  bool batched = x.rank() == 4;
  if (!batched) x = b.reshape(x, {1, x.dims()[0], x.dims()[1], x.dims()[2]});
  Geometry g = geometry(c, 1, x.dims()[2], x.dims()[3]);
  Value y = im2col4(b, x, g);
  if (!batched) y = b.reshape(y, {y.dims()[1], y.dims()[2]});
  return {y};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride);
// self [N, C * kh * kw, L] or [C * kh * kw, L].
std::vector<Value> col2im(Ctx& c) {
  hlo::Builder& b = c.b;
  Value cols = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
  bool batched = cols.rank() == 3;
  if (!batched) cols = b.reshape(cols, {1, cols.dims()[0], cols.dims()[1]});
  auto os = c.ints(1);
  TORCH_CHECK(os.size() == 2, "col2im: output_size must have 2 elements");
  Geometry g = geometry(c, 2, os[0], os[1]);
  TORCH_CHECK(g.oh * g.ow == cols.dims()[2], "col2im: expected ", g.oh * g.ow,
              " blocks, got ", cols.dims()[2]);
  Value y = col2im4(b, cols, g);
  if (!batched) y = b.reshape(y, {y.dims()[1], y.dims()[2], y.dims()[3]});
  return {y};
}

}  // namespace

void register_fold() {
  add("im2col", im2col);
  add("col2im", col2im);
}

}  // namespace tpu::lower

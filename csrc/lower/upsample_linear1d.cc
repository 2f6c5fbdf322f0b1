// 1-d linear interpolation: upsample_linear1d and its backward (SAM's and SAM-HQ's vision
// encoders resize relative position tables with F.interpolate(mode="linear")).
// As the 2-d kernels in resize.cc: the result is x A^T with a constant [out, in]
// interpolation matrix built on the host from PyTorch's source-index rule (its
// area_pixel_compute_scale, in float as the CPU kernel), and the backward applies A.
// The optional scale factor changes the matrix, so it is a static argument.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

Value linear_matrix(hlo::Builder& b, int64_t in, int64_t out, bool align, std::optional<double> s,
                    ElemType t) {
  float scale;
  if (align) {
    scale = out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  } else {
    scale = s && *s > 0 ? static_cast<float>(1.0 / *s) : static_cast<float>(in) / static_cast<float>(out);
  }
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    float src = align ? scale * static_cast<float>(o)
                      : std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.f);
    int64_t i0 = std::min(static_cast<int64_t>(src), in - 1);
    int64_t i1 = std::min(i0 + 1, in - 1);
    float l1 = std::min(std::max(src - static_cast<float>(i0), 0.f), 1.f);
    v[static_cast<size_t>(o * in + i0)] += 1.0 - l1;
    v[static_cast<size_t>(o * in + i1)] += l1;
  }
  return b.dense_f(v, {t, {out, in}});
}

std::optional<double> opt_scale(const Ctx& c, size_t i) {
  if (c.value(i).isNone()) return std::nullopt;
  return c.double_arg(i);
}

// x [N, C, W] times m^T ([W, OW]) -> [N, C, OW], in t.
Value apply(hlo::Builder& b, Value x, Value m, ElemType t) {
  auto d = x.dims();
  TORCH_CHECK(d.size() == 3, "upsample_linear1d: expected a 3-D input, got ", d.size(), "-D");
  Value flat = b.reshape(cast(b, x, t), {d[0] * d[1], d[2]});
  Value y = dot_acc(b, flat, m, {}, {}, {1}, {1}, t);
  return b.reshape(y, {d[0], d[1], m.dims()[0]});
}

// upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners, float? scales=None)
std::vector<Value> forward(Ctx& c) {
  Value x = c.tensor(0);
  ElemType t = opmath(x.elem());
  int64_t in = x.dims().back(), out = c.ints(1).at(0);
  Value m = linear_matrix(c.b, in, out, c.bool_arg(2), opt_scale(c, 3), t);
  return {cast(c.b, apply(c.b, x, m, t), x.elem())};
}

// upsample_linear1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size,
//                            bool align_corners, float? scales=None)
std::vector<Value> backward(Ctx& c) {
  Value g = c.tensor(0);
  ElemType t = opmath(g.elem());
  int64_t in = c.ints(2).at(2), out = g.dims().back();
  Value m = linear_matrix(c.b, in, out, c.bool_arg(3), opt_scale(c, 4), t);  // [out, in]
  return {cast(c.b, apply(c.b, g, c.b.transpose(m, {1, 0}), t), g.elem())};
}

}  // namespace

void register_upsample_linear1d() {
  add("upsample_linear1d", forward, {3});
  add("upsample_linear1d_backward", backward, {4});
}

}  // namespace tpu::lower

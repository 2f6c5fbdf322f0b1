// 2-d interpolation: upsample_nearest2d and upsample_bilinear2d, forward and
// backward. Each is separable, so the result is A_h x A_w^T with constant
// [out, in] interpolation matrices built on the host from PyTorch's source
// index rules; the backward applies the transposed matrices. The optional
// scale factors change those matrices, so they are static arguments.
#include <cmath>

#include "lower/interpolation.h"
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

Value nearest_matrix(hlo::Builder& b, int64_t in, int64_t out, std::optional<double> s, ElemType t) {
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  float scale = pixel_scale(in, out, false, s);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
    v[static_cast<size_t>(o * in + i)] = 1.0;
  }
  return b.dense_f(v, {t, {out, in}});
}


using MatFn = std::function<Value(hlo::Builder&, int64_t in, int64_t out, int axis, ElemType)>;

// upsample_*2d(self, output_size, ...) given the matrix rule.
std::vector<Value> forward(Ctx& c, const MatFn& m) {
  ElemType t = opmath(to_elem(c.dtype(0)));
  Value x = cast(c.b, c.tensor(0), t);
  auto os = c.ints(1);
  int64_t h = x.dims()[x.rank() - 2], w = x.dims()[x.rank() - 1];
  return {resize(c.b, x, m(c.b, h, os[0], 0, t), m(c.b, w, os[1], 1, t))};
}

// upsample_*2d_backward(grad_output, output_size, input_size, ...).
std::vector<Value> backward(Ctx& c, const MatFn& m) {
  ElemType t = opmath(to_elem(c.dtype(0)));
  Value g = cast(c.b, c.tensor(0), t);
  auto in = c.ints(2);
  int64_t h = in[in.size() - 2], w = in[in.size() - 1];
  int64_t oh = g.dims()[g.rank() - 2], ow = g.dims()[g.rank() - 1];
  Value ah = c.b.transpose(m(c.b, h, oh, 0, t), {1, 0});
  Value aw = c.b.transpose(m(c.b, w, ow, 1, t), {1, 0});
  return {resize(c.b, g, ah, aw)};
}

}  // namespace

float pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<float>(in - 1) / static_cast<float>(out - 1) : 0.f;
  if (scale && *scale > 0) return static_cast<float>(1.0 / *scale);
  return static_cast<float>(in) / static_cast<float>(out);
}

std::optional<double> opt_double(const Ctx& c, size_t i) {
  const c10::IValue& v = c.value(i);
  if (v.isNone()) return std::nullopt;
  return c.double_arg(i);
}

Value linear_matrix(hlo::Builder& b, int64_t in, int64_t out, bool align, std::optional<double> s,
                    ElemType t) {
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  float scale = pixel_scale(in, out, align, s);
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

void register_resize() {
  // upsample_nearest2d(self, output_size, scales_h?, scales_w?)
  add("upsample_nearest2d", [](Ctx& c) -> std::vector<Value> {
    return forward(c, [&c](hlo::Builder& b, int64_t in, int64_t out, int axis, ElemType t) {
      return nearest_matrix(b, in, out, opt_double(c, 2 + axis), t);
    });
  }, {2, 3});
  // upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h?, scales_w?)
  add("upsample_nearest2d_backward", [](Ctx& c) -> std::vector<Value> {
    return backward(c, [&c](hlo::Builder& b, int64_t in, int64_t out, int axis, ElemType t) {
      return nearest_matrix(b, in, out, opt_double(c, 3 + axis), t);
    });
  }, {3, 4});
  // upsample_bilinear2d(self, output_size, align_corners, scales_h?, scales_w?)
  add("upsample_bilinear2d", [](Ctx& c) -> std::vector<Value> {
    bool align = c.bool_arg(2);
    return forward(c, [&c, align](hlo::Builder& b, int64_t in, int64_t out, int axis, ElemType t) {
      return linear_matrix(b, in, out, align, opt_double(c, 3 + axis), t);
    });
  }, {3, 4});
  // upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
  //                              scales_h?, scales_w?)
  add("upsample_bilinear2d_backward", [](Ctx& c) -> std::vector<Value> {
    bool align = c.bool_arg(3);
    return backward(c, [&c, align](hlo::Builder& b, int64_t in, int64_t out, int axis, ElemType t) {
      return linear_matrix(b, in, out, align, opt_double(c, 4 + axis), t);
    });
  }, {4, 5});
}

}  // namespace tpu::lower

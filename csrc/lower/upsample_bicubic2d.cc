// Bicubic 2-d interpolation: upsample_bicubic2d and its backward (ViTDet and YOLOS
// resize their position embeddings with F.interpolate(mode="bicubic")).
// Separable like resize.cc's kernels: the result is A_h x A_w^T with constant
// [out, in] matrices built on the host from PyTorch's cubic source-index rule
// (area_pixel_compute_source_index with cubic=true: no clamping at 0), Keys'
// cubic convolution with A = -0.75, and taps clamped to the border; the backward
// applies the transposed matrices. Scale factors change the matrices, so they
// are static arguments.
#include <cmath>

#include "lower/interpolation.h"
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

constexpr float kA = -0.75f;

float cubic_near(float x) { return ((kA + 2) * x - (kA + 3)) * x * x + 1; }      // |x| <= 1
float cubic_far(float x) { return ((kA * x - 5 * kA) * x + 8 * kA) * x - 4 * kA; }  // 1 < |x| < 2

// The bicubic interpolation matrix [out, in] in type t, computed in float as
// PyTorch's CPU kernel does.
Value cubic_matrix(hlo::Builder& b, int64_t in, int64_t out, bool align, std::optional<double> s,
                   ElemType t) {
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  float scale = pixel_scale(in, out, align, s);
  for (int64_t o = 0; o < out; ++o) {
    float src = align ? scale * static_cast<float>(o) : scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    float l = std::min(std::max(src - static_cast<float>(i0), 0.f), 1.f);
    const float w[4] = {cubic_far(l + 1), cubic_near(l), cubic_near(1 - l), cubic_far(2 - l)};
    for (int64_t k = 0; k < 4; ++k) {
      int64_t i = std::min(std::max(i0 - 1 + k, int64_t{0}), in - 1);
      v[static_cast<size_t>(o * in + i)] += w[k];
    }
  }
  return b.dense_f(v, {t, {out, in}});
}

// upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners,
//                    float? scales_h=None, float? scales_w=None)
std::vector<Value> forward(Ctx& c) {
  Value x0 = c.tensor(0);
  TORCH_CHECK(x0.rank() == 4, "upsample_bicubic2d: expected a 4-D input, got ", x0.rank(), "-D");
  ElemType t = opmath(x0.elem());
  Value x = cast(c.b, x0, t);
  auto os = c.ints(1);
  bool align = c.bool_arg(2);
  int64_t h = x.dims()[2], w = x.dims()[3];
  Value ah = cubic_matrix(c.b, h, os.at(0), align, opt_double(c, 3), t);
  Value aw = cubic_matrix(c.b, w, os.at(1), align, opt_double(c, 4), t);
  return {cast(c.b, resize(c.b, x, ah, aw), x0.elem())};
}

// upsample_bicubic2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size,
//                             bool align_corners, float? scales_h=None, float? scales_w=None)
std::vector<Value> backward(Ctx& c) {
  Value g0 = c.tensor(0);
  ElemType t = opmath(g0.elem());
  Value g = cast(c.b, g0, t);
  auto in = c.ints(2);
  TORCH_CHECK(in.size() == 4 && g.rank() == 4,
              "upsample_bicubic2d_backward: expected 4-D input_size and grad_output");
  bool align = c.bool_arg(3);
  int64_t oh = g.dims()[2], ow = g.dims()[3];
  Value ah = c.b.transpose(cubic_matrix(c.b, in[2], oh, align, opt_double(c, 4), t), {1, 0});
  Value aw = c.b.transpose(cubic_matrix(c.b, in[3], ow, align, opt_double(c, 5), t), {1, 0});
  return {cast(c.b, resize(c.b, g, ah, aw), g0.elem())};
}

}  // namespace

void register_upsample_bicubic2d() {
  add("upsample_bicubic2d", forward, {3, 4});
  add("upsample_bicubic2d_backward", backward, {4, 5});
}

}  // namespace tpu::lower

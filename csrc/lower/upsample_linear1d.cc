// 1-d linear interpolation: upsample_linear1d and its backward (SAM's and SAM-HQ's vision
// encoders resize relative position tables with F.interpolate(mode="linear")).
// As the 2-d kernels in resize.cc, whose per-axis matrix it uses (lower/interpolation.h):
// the result is x A^T with a constant [out, in] interpolation matrix built on the host
// from PyTorch's source-index rule, and the backward applies A.
// The optional scale factor changes the matrix, so it is a static argument.
#include <optional>

#include "lower/helpers.h"
#include "lower/interpolation.h"

namespace tpu::lower {

namespace {

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
  Value m = linear_matrix(c.b, in, out, c.bool_arg(2), opt_double(c, 3), t);
  return {cast(c.b, apply(c.b, x, m, t), x.elem())};
}

// upsample_linear1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size,
//                            bool align_corners, float? scales=None)
std::vector<Value> backward(Ctx& c) {
  Value g = c.tensor(0);
  ElemType t = opmath(g.elem());
  int64_t in = c.ints(2).at(2), out = g.dims().back();
  Value m = linear_matrix(c.b, in, out, c.bool_arg(3), opt_double(c, 4), t);  // [out, in]
  return {cast(c.b, apply(c.b, g, c.b.transpose(m, {1, 0}), t), g.elem())};
}

}  // namespace

void register_upsample_linear1d() {
  add("upsample_linear1d", forward, {3});
  add("upsample_linear1d_backward", backward, {4});
}

}  // namespace tpu::lower

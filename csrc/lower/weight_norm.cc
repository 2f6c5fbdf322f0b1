// The fused weight norm (w = g * v / ||v||, the norm over every dimension but one) and its
// backward. PyTorch's torch._weight_norm calls these for the first or last dimension;
// Transformers' speech encoders (wav2vec2, HuBERT, WavLM, UniSpeech, SEW, Data2Vec-Audio)
// put it on their convolutional positional embedding.
//   forward:  norm = sqrt(sum_{others} v^2)      (g's shape, in the accumulate type)
//             w    = v * (g / norm)
//   backward: a      = sum_{others} grad_w * v
//             grad_g = a / norm
//             grad_v = (g / norm) * (grad_w - v * a / norm^2)
// as the CPU kernels (WeightNorm.cpp) compute them, in float for half/bfloat16.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

// The dimensions summed over: all but `dim`, which must be the first or the last.
std::vector<int64_t> other_dims(int64_t dim, int64_t rank) {
  int64_t d = dim;  // not wrapped: the CPU kernel refuses -1 too
  TORCH_CHECK(d == 0 || d == rank - 1,
              "fused kernels can only be applied for first or last dim");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != d) dims.push_back(i);
  }
  return dims;
}

// ||v|| over `dims`, kept as g's (broadcastable) shape, in `acc`.
Value norm_except(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, ElemType acc) {
  Value vf = cast(b, v, acc);
  return b.unary("sqrt", reduce_sum(b, b.mul(vf, vf), dims, /*keepdim=*/true));
}

// _weight_norm_interface(Tensor v, Tensor g, int dim=0) -> (Tensor, Tensor)
std::vector<Value> weight_norm(Ctx& c) {
  hlo::Builder& b = c.b;
  Value v = c.tensor(0), g = c.tensor(1);
  int64_t rank = static_cast<int64_t>(v.dims().size());
  ElemType acc = opmath(v.elem());
  Value norm = norm_except(b, v, other_dims(c.int_arg(2), rank), acc);
  Value scale = b.div(cast(b, b.reshape(g, norm.dims()), acc), norm);
  Value w = b.mul(cast(b, v, acc), bcast(b, scale, v.dims()));
  return {cast(b, w, v.elem()), b.reshape(norm, g.dims())};
}

// _weight_norm_interface_backward(Tensor grad_w, Tensor saved_v, Tensor saved_g,
//                                 Tensor saved_norms, int dim) -> (Tensor, Tensor)
std::vector<Value> weight_norm_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  Value gw = c.tensor(0), v = c.tensor(1), g = c.tensor(2), norms = c.tensor(3);
  int64_t rank = static_cast<int64_t>(v.dims().size());
  std::vector<int64_t> dims = other_dims(c.int_arg(4), rank);
  ElemType acc = opmath(v.elem());
  Value vf = cast(b, v, acc), gwf = cast(b, gw, acc);
  Value a = reduce_sum(b, b.mul(gwf, vf), dims, /*keepdim=*/true);
  Value norm = cast(b, b.reshape(norms, a.dims()), acc);
  Value gf = cast(b, b.reshape(g, a.dims()), acc);
  Value grad_g = b.div(a, norm);
  Value per_row = b.div(a, b.mul(norm, norm));
  Value grad_v = b.mul(bcast(b, b.div(gf, norm), v.dims()),
                       b.sub(gwf, b.mul(vf, bcast(b, per_row, v.dims()))));
  return {cast(b, grad_v, v.elem()), cast(b, b.reshape(grad_g, g.dims()), g.elem())};
}

}  // namespace

void register_weight_norm() {
  add("_weight_norm_interface", weight_norm);
  add("_weight_norm_interface_backward", weight_norm_backward);
}

}  // namespace tpu::lower

// Small helpers shared by the nn op-family lowerings (norm, conv, pooling,
// resize, indexing, selection, activations, losses, statistics, dropout).
// Header-only: each is a few builder calls.
#pragma once

#include <numeric>

#include "lower/helpers.h"

namespace tpu::lower::nn {

inline std::vector<int64_t> iota_dims(int64_t from, int64_t to) {
  std::vector<int64_t> d;
  for (int64_t i = from; i < to; ++i) d.push_back(i);
  return d;
}

inline int64_t numel_of(const std::vector<int64_t>& dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<int64_t>());
}

// Result k in the shape PyTorch's meta kernel gave it. Some ops return empty
// placeholders (e.g. batch norm's saved statistics in eval mode, or a gradient
// the output_mask did not ask for); those get a zero splat of the meta shape.
inline Value fit_meta(Ctx& c, size_t k, Value v) {
  const auto& m = c.out_meta();
  // Undefined results (dtype Undefined) are dropped by the caller.
  if (k >= m.size() || m[k].sizes == v.dims() || m[k].dtype == c10::ScalarType::Undefined)
    return v;
  if (numel_of(m[k].sizes) == 0) {
    hlo::TensorType t{v.elem(), m[k].sizes};
    return hlo::is_float(t.elem) ? c.b.splat_f(0, t) : c.b.splat_i(0, t);
  }
  if (numel_of(m[k].sizes) == v.type.numel()) return c.b.reshape(v, m[k].sizes);
  return c.b.broadcast_to(v, m[k].sizes);
}

// The floating type an nn op computes in: opmath of the input's dtype.
inline ElemType float_opmath(c10::ScalarType t) {
  if (!c10::isFloatingType(t)) t = c10::typeMetaToScalarType(c10::get_default_dtype());
  return opmath(to_elem(t));
}

// A rank-0 runtime scalar argument broadcast to `dims`.
inline Value scalar_bcast(Ctx& c, size_t i, ElemType t, const std::vector<int64_t>& dims) {
  return bcast(c.b, c.scalar(i, t), dims);
}

// Broadcasts a per-channel vector [C] to `dims` along `channel_dim`.
inline Value per_channel(hlo::Builder& b, Value v, const std::vector<int64_t>& dims,
                         int64_t channel_dim) {
  return b.broadcast_in_dim(v, dims, {channel_dim});
}

// x [B, H, W] -> A_h x A_w^T with A_* [out, in]: [B, OH, OW]. Adaptive pooling
// and interpolation are such products with constant matrices.
inline Value apply_hw(hlo::Builder& b, Value x, Value ah, Value aw) {
  ElemType t = x.elem();
  Value y = b.dot_general(x, aw, {}, {}, {2}, {1}, t);  // [B, H, OW]
  y = b.dot_general(y, ah, {}, {}, {1}, {1}, t);        // [B, OW, OH]
  return b.transpose(y, {0, 2, 1});
}

// All dims but the last two.
inline std::vector<int64_t> leading_dims(const Value& x) {
  return {x.dims().begin(), x.dims().end() - 2};
}

// x [..., H, W] -> [..., OH, OW] with A_h [OH, H], A_w [OW, W]: apply_hw over
// the leading dims flattened (the upsample lowerings and their backwards).
inline Value resize(hlo::Builder& b, Value x, Value ah, Value aw) {
  int64_t h = x.dims()[x.rank() - 2], w = x.dims()[x.rank() - 1];
  Value y = apply_hw(b, b.reshape(x, {numel_of(leading_dims(x)), h, w}), ah, aw);
  auto od = leading_dims(x);
  od.push_back(ah.dims()[0]);
  od.push_back(aw.dims()[0]);
  return b.reshape(y, od);
}

}  // namespace tpu::lower::nn

// Row gathers and scatter-adds shared by the lowerings that index with
// computed positions (distance, grid_sample, adaptive_pool): a [K] index
// vector picks or accumulates rows of a rank-2 [N, M] operand, and
// take_along picks positions along one axis of any rank. Header-only.
#pragma once

#include "lower/nn_common.h"

namespace tpu::lower::rows {

// x [N, M], idx [K] (integer) -> [K, M] with row k = x[idx[k]].
inline Value take(hlo::Builder& b, Value x, Value idx) {
  int64_t k = idx.dims()[0], m = x.dims()[1];
  hlo::Builder::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  return b.gather(x, b.reshape(idx, {k, 1}), g, {1, m}, {x.elem(), {k, m}});
}

// acc [N, M] with upd [K, M] added at rows idx [K] (repeats accumulate).
inline Value scatter_add(hlo::Builder& b, Value acc, Value idx, Value upd) {
  int64_t k = idx.dims()[0];
  hlo::Builder::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  return b.scatter(acc, b.reshape(idx, {k, 1}), upd, s, &add);
}

// x with axis `axis` replaced by the positions in `pos` (host constants):
// result[..., i, ...] = x[..., pos[i], ...].
inline Value take_along(hlo::Builder& b, Value x, int64_t axis, const std::vector<int64_t>& pos) {
  int64_t r = x.rank(), n = static_cast<int64_t>(pos.size());
  hlo::Builder::GatherDims g;
  for (int64_t d = 0; d < r; ++d)
    if (d != axis) g.offset_dims.push_back(d);
  g.collapsed_slice_dims = {axis};
  g.start_index_map = {axis};
  g.index_vector_dim = 1;
  std::vector<int64_t> slice = x.dims(), out = x.dims();
  slice[axis] = 1;
  out[axis] = n;
  Value idx = b.dense_i(pos, {ElemType::S64, {n, 1}});
  return b.gather(x, idx, g, slice, {x.elem(), out});
}

}  // namespace tpu::lower::rows

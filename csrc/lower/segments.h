// Segments of a jagged dimension, shared by the fbgemm lowerings (jagged.cc, tbe.cc):
// a prefix sum, and the segment each position falls in. Header-only.
#pragma once

#include "lower/helpers.h"

namespace tpu::lower::segments {

// Inclusive prefix sum along the last axis.
inline Value prefix_sum(hlo::Builder& b, Value x) {
  int64_t r = x.rank(), n = x.dims().back();
  if (n == 0) return x;
  std::vector<int64_t> win(r, 1), ones(r, 1);
  win[r - 1] = n;
  std::vector<std::pair<int64_t, int64_t>> pads(r, {0, 0});
  pads[r - 1] = {n - 1, 0};
  Value init = hlo::is_float(x.elem()) ? b.constant_f(0, x.elem()) : b.constant_i(0, x.elem());
  return b.reduce_window(x, init, win, ones, ones, ones, pads, hlo::ReduceOp::Add);
}

// seg[j] = #{k : ends[k] <= j} for j in [0, n): the segment position j falls in, for
// non-decreasing segment ends (S64 [K]); positions past the last end get K. A scatter
// of the ends and a prefix sum: no search, no data-dependent shape.
inline Value seg_of(hlo::Builder& b, Value ends, int64_t n) {
  const ElemType s64 = ElemType::S64;
  int64_t k = ends.dims()[0];
  if (k == 0 || n == 0) return b.splat_i(0, {s64, {n}});
  Value where = b.reshape(b.clamp(b.constant_i(0, s64), ends, b.constant_i(n, s64)), {k, 1});
  hlo::Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  Value counts = b.scatter(b.splat_i(0, {s64, {n + 1}}), where, b.splat_i(1, {s64, {k}}), s, &add);
  return b.slice(prefix_sum(b, counts), {0}, {n}, {1});
}

}  // namespace tpu::lower::segments

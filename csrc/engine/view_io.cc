#include "engine/view_io.h"

#include <algorithm>
#include <numeric>

namespace tpu::engine {

using hlo::ElemType;
using hlo::TensorType;
using hlo::Value;

int64_t ViewLayout::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool ViewLayout::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

bool covers_whole(const ViewLayout& v, int64_t length) {
  return v.offset == 0 && v.numel() == length && v.is_contiguous();
}

namespace {

// Flat element index of every view element, shape sizes (s64).
Value flat_indices(hlo::Builder& b, const ViewLayout& v) {
  TensorType t{ElemType::S64, v.sizes};
  Value idx = b.splat_i(v.offset, t);
  for (size_t j = 0; j < v.sizes.size(); ++j) {
    if (v.sizes[j] == 1 || v.strides[j] == 0) continue;
    Value term = b.mul(b.iota(t, static_cast<int64_t>(j)), b.splat_i(v.strides[j], t));
    idx = b.add(idx, term);
  }
  return idx;
}

Value gather_view(hlo::Builder& b, Value base, const ViewLayout& v) {
  int64_t n = v.numel();
  Value idx = b.reshape(flat_indices(b, v), {n, 1});
  hlo::Builder::GatherDims d;
  d.collapsed_slice_dims = {0};
  d.start_index_map = {0};
  d.index_vector_dim = 1;
  Value g = b.gather(base, idx, d, {1}, TensorType{base.elem(), {n}});
  return b.reshape(g, v.sizes);
}

// Slice/reshape/transpose form of a non-overlapping strided view whose strides
// each divide the next larger one. Returns an invalid Value when not applicable.
Value structured_view(hlo::Builder& b, Value base, const ViewLayout& v) {
  // Dimensions that actually step through memory.
  std::vector<int64_t> dims;
  for (size_t j = 0; j < v.sizes.size(); ++j)
    if (v.sizes[j] > 1 && v.strides[j] > 0) dims.push_back(static_cast<int64_t>(j));
  if (dims.empty()) return Value{};
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t c) { return v.strides[a] > v.strides[c]; });
  size_t k = dims.size();
  std::vector<int64_t> region;  // [n_1, ..., n_k, unit]
  for (size_t j = 0; j < k; ++j) {
    int64_t s = v.sizes[dims[j]], t = v.strides[dims[j]];
    if (j == 0) {
      region.push_back(s);
    } else {
      int64_t outer = v.strides[dims[j - 1]];
      if (outer % t != 0 || s > outer / t) return Value{};
      region.push_back(outer / t);
    }
  }
  int64_t unit = v.strides[dims[k - 1]];
  region.push_back(unit);
  // The view's offset as coordinates in the region: the outermost one moves the flat
  // window by whole rows, the inner ones start the region's slice. So a view that
  // starts inside a row (the second part of a split along an inner dimension, such as
  // k and v of a fused qkv projection) is a slice of the base reshaped, which XLA
  // fuses into the consumer, not a pad of the whole base (a copy) to keep an unaligned
  // window in range. When the view overruns a row of the region from its offset, the
  // window starts at the offset itself (and is padded if it overruns the base).
  std::vector<int64_t> start(region.size(), 0), limit, step(region.size(), 1);
  int64_t window = v.offset;
  {
    const int64_t into_row = v.offset % v.strides[dims[0]];
    int64_t rest = into_row;
    std::vector<int64_t> at(region.size(), 0);
    bool fits = true;
    for (size_t j = 1; j < k; ++j) {
      at[j] = rest / v.strides[dims[j]];
      rest -= at[j] * v.strides[dims[j]];
      fits &= at[j] + v.sizes[dims[j]] <= region[j];
    }
    at[k] = rest;  // < unit
    if (fits) {
      start = at;
      window = v.offset - into_row;
    }
  }
  int64_t span = v.sizes[dims[0]] * v.strides[dims[0]];
  int64_t length = base.dims()[0];
  Value flat = base;
  if (window + span > length) {
    int64_t extra = window + span - length;
    flat = b.pad(flat, b.constant_i(0, base.elem()), {0}, {extra}, {0});
  }
  if (window != 0 || span != length) flat = b.slice(flat, {window}, {window + span}, {1});
  Value r = b.reshape(flat, region);
  for (size_t j = 0; j < k; ++j) limit.push_back(start[j] + v.sizes[dims[j]]);
  limit.push_back(start[k] + 1);
  r = b.slice(r, start, limit, step);
  std::vector<int64_t> sorted_sizes;
  for (size_t j = 0; j < k; ++j) sorted_sizes.push_back(v.sizes[dims[j]]);
  r = b.reshape(r, sorted_sizes);
  // Back to the view's dimension order (among the stepping dims).
  std::vector<int64_t> order(dims.begin(), dims.end());
  std::vector<int64_t> by_position(k);
  std::iota(by_position.begin(), by_position.end(), 0);
  std::sort(by_position.begin(), by_position.end(),
            [&](int64_t a, int64_t c) { return order[a] < order[c]; });
  bool identity = true;
  for (size_t j = 0; j < k; ++j) identity &= by_position[j] == static_cast<int64_t>(j);
  if (!identity) r = b.transpose(r, by_position);
  // Re-insert size-1 dims and broadcast stride-0 dims.
  std::vector<int64_t> kept_positions;
  for (size_t j = 0; j < v.sizes.size(); ++j)
    if (v.sizes[j] > 1 && v.strides[j] > 0) kept_positions.push_back(static_cast<int64_t>(j));
  return b.broadcast_in_dim(r, v.sizes, kept_positions);
}

}  // namespace

bool dense_order(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 std::vector<int64_t>* order) {
  if (sizes.size() != strides.size()) return false;
  order->resize(sizes.size());
  std::iota(order->begin(), order->end(), 0);
  // Size-1 dimensions step nowhere: wherever they sit, the layout is the same.
  auto key = [&](int64_t d) { return sizes[d] == 1 ? INT64_MAX : strides[d]; };
  std::stable_sort(order->begin(), order->end(),
                   [&](int64_t a, int64_t c) { return key(a) > key(c); });
  int64_t expected = 1;
  for (auto it = order->rbegin(); it != order->rend(); ++it) {
    if (sizes[*it] == 1) continue;
    if (strides[*it] != expected) return false;
    expected *= sizes[*it];
  }
  return true;
}

bool permuted_dense_order(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                          std::vector<int64_t>* order) {
  if (!dense_order(sizes, strides, order)) return false;
  for (size_t d = 0; d < order->size(); ++d)
    if (sizes[(*order)[d]] != 1 && (*order)[d] != static_cast<int64_t>(d)) return true;
  return false;
}

Value read_view(hlo::Builder& b, Value base, const ViewLayout& v) {
  int64_t length = base.dims()[0];
  int64_t n = v.numel();
  if (covers_whole(v, length)) return b.reshape(base, v.sizes);
  if (n == 0) return b.reshape(b.slice(base, {0}, {0}, {1}), v.sizes);
  if (v.is_contiguous()) return b.reshape(b.slice(base, {v.offset}, {v.offset + n}, {1}), v.sizes);
  bool all_broadcast = true;  // e.g. expand() of a single element
  for (size_t j = 0; j < v.sizes.size(); ++j)
    all_broadcast &= v.sizes[j] == 1 || v.strides[j] == 0;
  if (all_broadcast) {
    Value one = b.reshape(b.slice(base, {v.offset}, {v.offset + 1}, {1}), {});
    return b.broadcast_in_dim(one, v.sizes, {});
  }
  Value s = structured_view(b, base, v);
  if (s.valid()) return s;
  return gather_view(b, base, v);
}

Value write_view(hlo::Builder& b, Value base, const ViewLayout& v, Value value) {
  int64_t length = base.dims()[0];
  int64_t n = v.numel();
  if (value.elem() != base.elem()) value = b.convert(value, base.elem());
  if (covers_whole(v, length)) return b.reshape(value, {length});
  if (n == 0) return base;
  if (v.is_contiguous()) {
    Value start = b.constant_i(v.offset, ElemType::S64);
    return b.dynamic_update_slice(base, b.reshape(value, {n}), {start});
  }
  // A dense view in another dimension order (a transposed or channels-last result, as
  // `.to(dtype)` or `clone()` of a transposed tensor allocates) fills the contiguous
  // range [offset, offset + n) in that order: the value transposed to memory order,
  // written like a contiguous one. A scatter would write the same elements through n
  // 64-bit indices, which XLA's CPU backend runs element by element.
  std::vector<int64_t> order;
  if (dense_order(v.sizes, v.strides, &order)) {
    Value flat = b.reshape(b.transpose(value, order), {n});
    if (n == length) return flat;
    return b.dynamic_update_slice(base, flat, {b.constant_i(v.offset, ElemType::S64)});
  }
  Value idx = b.reshape(flat_indices(b, v), {n, 1});
  hlo::Builder::ScatterDims d;
  d.inserted_window_dims = {0};
  d.scatter_dims_to_operand_dims = {0};
  d.index_vector_dim = 1;
  return b.scatter(base, idx, b.reshape(value, {n}), d, nullptr);
}

}  // namespace tpu::engine

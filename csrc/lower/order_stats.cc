// Order statistics and mask-driven placement: median / nanmedian (whole
// tensor and along a dim, with indices) and masked_scatter.
//
// median picks the lower median of a stable ascending sort, so ties resolve to
// the same index PyTorch's CPU kernel returns. A slice holding NaN has median
// NaN at the index of its first NaN; nanmedian takes the lower median of the
// non-NaN values instead. An all-NaN slice gives NaN at index 0; PyTorch's CPU
// index there is whatever its nth_element leaves (0 only for slices of <= 3).
//
// masked_scatter cannot check on the device that source has enough elements
// (a data-dependent count): positions past its end repeat its last element.
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// Sum over `dim` of v where `mask` holds, else nothing: with exactly one true
// per slice this picks that element. Floats fill and start with -0.0, the
// additive identity that keeps the picked value's sign (even for -0.0).
Value pick_along(hlo::Builder& b, Value mask, Value v, int64_t dim) {
  bool fl = hlo::is_float(v.elem());
  Value init = fl ? b.constant_f(-0.0, v.elem()) : b.constant_i(0, v.elem());
  Value filled = b.select(mask, v, b.broadcast_to(init, v.dims()));
  return b.reduce(filled, init, {dim}, hlo::ReduceOp::Add);
}

struct Median {
  Value values, indices;  // dim removed
};

Median median_along(hlo::Builder& b, Value x, int64_t dim, bool ignore_nan) {
  int64_t n = x.dims()[dim];
  auto [v, i] = sort_with_index(b, x, dim, false);
  std::vector<int64_t> kd = x.dims();
  kd[dim] = 1;
  hlo::TensorType ktype{ElemType::S64, kd};
  Value pos;
  if (hlo::is_float(x.elem())) {
    Value nan = cast(b, b.compare(x, x, Cmp::NE), ElemType::S64);
    Value nans = b.reshape(reduce_sum(b, nan, {dim}, false), kd);
    Value zero = b.splat_i(0, ktype);
    if (ignore_nan) {
      // NaN sorts last: the lower median of the first n - nans positions.
      Value k = b.sub(b.splat_i(n, ktype), nans);
      Value lower = b.div(b.sub(k, b.splat_i(1, ktype)), b.splat_i(2, ktype));
      pos = b.select(b.compare(k, zero, Cmp::GT), lower, zero);
    } else {
      // Any NaN: the first NaN, at position n - nans of the sorted slice.
      pos = b.select(b.compare(nans, zero, Cmp::GT), b.sub(b.splat_i(n, ktype), nans),
                     b.splat_i((n - 1) / 2, ktype));
    }
  } else {
    pos = b.splat_i((n - 1) / 2, ktype);
  }
  Value at = b.compare(b.iota({ElemType::S64, x.dims()}, dim), b.broadcast_to(pos, x.dims()), Cmp::EQ);
  return {pick_along(b, at, v, dim), pick_along(b, at, i, dim)};
}

// median() / nanmedian(): the whole tensor's (lower) median, no index.
LowerFn median_all(bool ignore_nan) {
  return [ignore_nan](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    if (x.elem() == ElemType::PRED) x = b.convert(x, ElemType::U8);
    int64_t n = x.type.numel();
    if (n == 0) {
      // PyTorch returns NaN for an empty input.
      hlo::TensorType t{x.elem(), {}};
      return {hlo::is_float(t.elem) ? b.splat_f(std::numeric_limits<double>::quiet_NaN(), t)
                                    : b.splat_i(0, t)};
    }
    return {median_along(b, b.reshape(x, {n}), 0, ignore_nan).values};
  };
}

// median.dim / nanmedian.dim(self, dim, keepdim) -> (values, indices).
LowerFn median_dim(bool ignore_nan) {
  return [ignore_nan](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    if (x.elem() == ElemType::PRED) x = b.convert(x, ElemType::U8);
    if (x.rank() == 0) return {x, b.constant_i(0, ElemType::S64)};
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    TORCH_CHECK_INDEX(x.dims()[dim] > 0, "median(): Expected reduction dim ", dim,
                      " to have non-zero size.");
    Median m = median_along(b, x, dim, ignore_nan);
    if (c.bool_arg(2)) {
      std::vector<int64_t> kd = x.dims();
      kd[dim] = 1;
      return {b.reshape(m.values, kd), b.reshape(m.indices, kd)};
    }
    return {m.values, m.indices};
  };
}

// masked_scatter(self, mask, source): the k-th true position of the (broadcast)
// mask takes source.flatten()[k]. An inclusive prefix count of the mask gives
// each position its k + 1; other positions keep self.
std::vector<Value> masked_scatter(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::vector<int64_t>& shape = c.out_meta()[0].sizes;
  ElemType t = to_elem(c.out_dtype(0));
  Value x = bcast(b, cast(b, c.tensor(0), t), shape);
  Value mask = bcast(b, cast(b, c.tensor(1), ElemType::PRED), shape);
  Value src = c.tensor(2);
  int64_t n = numel_of(shape), s = src.type.numel();
  if (n == 0 || s == 0) return {x};  // PyTorch requires no true mask entry then
  Value m = b.reshape(mask, {n});
  Value count = b.reduce_window(cast(b, m, ElemType::S64), b.constant_i(0, ElemType::S64), {n}, {1}, {1},
                                {1}, {{n - 1, 0}}, hlo::ReduceOp::Add);
  Value idx = b.clamp(b.constant_i(0, ElemType::S64), b.sub(count, b.splat_i(1, count.type)),
                      b.constant_i(s - 1, ElemType::S64));
  hlo::Builder::GatherDims gd;
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value flat_src = b.reshape(cast(b, src, t), {s});
  Value taken = b.gather(flat_src, b.reshape(idx, {n, 1}), gd, {1}, {t, {n}});
  return {b.select(mask, b.reshape(taken, shape), x)};
}

}  // namespace

void register_order_stats() {
  add("median", median_all(false));
  add("nanmedian", median_all(true));
  add("median.dim", median_dim(false));
  add("nanmedian.dim", median_dim(true));
  add("masked_scatter", masked_scatter);
}

}  // namespace tpu::lower

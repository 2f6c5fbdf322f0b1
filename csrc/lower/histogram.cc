// histc: counts of a tensor's elements in `bins` equal-width bins over [min, max],
// with CUDA's semantics (SummaryOps.cu), integer inputs included: Mixtral's and
// Qwen2-MoE's routing count tokens per expert with histc on integer expert ids,
// which PyTorch's CPU kernel refuses.
//   - min == max: the range is the data's own [min, max] (when the input is not
//     empty), widened by one on each side if still empty.
//   - elements outside [min, max] (and NaN) are not counted; max goes to the last bin.
//   - bin = (x - min) * bins / (max - min) in the input's accumulate type (int64 for
//     integers, so integer division; float for float/half/bf16, double for double),
//     truncated; the result has the input's dtype.
// min and max are structural (a program per range): they decide which range checks
// apply. Counting is a scatter-add of ones into bins + 1 slots (the extra slot
// takes the elements that are not counted), in int64, then cast.
// Not checked: CUDA's "range of [a, b] is not finite" error when the data-driven
// range contains inf or NaN (such elements are then simply not counted).
#include <cmath>

#include "lower/rows.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// (self, bins, min, max)
std::vector<Value> histc(Ctx& c) {
  hlo::Builder& b = c.b;
  c10::ScalarType dt = c.dtype(0);
  TORCH_CHECK(!c10::isComplexType(dt) && dt != c10::ScalarType::Bool,
              "torch.histc: ", dt, " inputs are not supported");
  int64_t bins = c.int_arg(1);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  bool integral = c10::isIntegralType(dt, /*includeBool=*/false);
  ElemType acc = integral ? ElemType::S64 : opmath(to_elem(dt));
  double lo = c.double_arg(2), hi = c.double_arg(3);
  if (integral) {  // CUDA converts the bounds to the input type
    lo = std::trunc(lo);
    hi = std::trunc(hi);
  }
  Value x = c.tensor(0);
  int64_t n = x.type.numel();
  x = cast(b, b.reshape(x, {n}), acc);
  auto constant = [&](double v) {
    return integral ? b.constant_i(static_cast<int64_t>(v), acc) : b.constant_f(v, acc);
  };
  Value lo_v, hi_v;
  if (lo == hi && n > 0) {
    // The data's range; an empty one widened by one on each side.
    lo_v = reduce_min(b, x, {0}, false);
    hi_v = reduce_max(b, x, {0}, false);
    Value same = b.compare(lo_v, hi_v, Cmp::EQ);
    lo_v = b.select(same, b.sub(lo_v, constant(1)), lo_v);
    hi_v = b.select(same, b.add(hi_v, constant(1)), hi_v);
  } else {
    if (lo == hi) {
      lo -= 1;
      hi += 1;
    }
    TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)),
                "torch.histc: range of [", lo, ", ", hi, "] is not finite");
    TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
    lo_v = constant(lo);
    hi_v = constant(hi);
  }
  if (n == 0) return {b.splat_i(0, {to_elem(dt), {bins}})};
  Value lo_b = bcast(b, lo_v, {n}), hi_b = bcast(b, hi_v, {n});
  Value inside = b.binary("and", b.compare(x, lo_b, Cmp::GE), b.compare(x, hi_b, Cmp::LE));
  Value scaled = b.div(b.mul(b.sub(x, lo_b), bcast(b, constant(static_cast<double>(bins)), {n})),
                       bcast(b, b.sub(hi_v, lo_v), {n}));
  Value bin = b.convert(scaled, ElemType::S64);  // truncates, as CUDA's (int) cast
  Value last = b.splat_i(bins - 1, {ElemType::S64, {n}});
  bin = b.select(inside, b.min(bin, last), b.splat_i(bins, {ElemType::S64, {n}}));
  Value counts = rows::scatter_add(b, b.splat_i(0, {ElemType::S64, {bins + 1, 1}}), bin,
                                   b.splat_i(1, {ElemType::S64, {n, 1}}));
  counts = b.reshape(b.slice(counts, {0, 0}, {bins, 1}, {1, 1}), {bins});
  return {cast(b, counts, to_elem(dt))};
}

}  // namespace

void register_histogram() {
  add("histc", histc, {2, 3});
}

}  // namespace tpu::lower

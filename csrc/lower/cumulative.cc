// cummax / cummin (values and indices along a dim). PyTorch implements them
// with a CPU-only helper (_cummax_helper) behind a composite; lowering the
// ops themselves keeps them on the device.
//
// Position i reduces over positions j <= i of its slice: a [..., L, L] masked
// pairwise reduce whose combiner prefers NaN, then the better value, then the
// later index on ties (PyTorch's cummax/cummin keep the last equal element).
#include <limits>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

LowerFn cum_extreme(bool is_max) {
  return [is_max](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    if (x.rank() == 0) return {x, b.splat_i(0, {ElemType::S64, {}})};
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    int64_t r = x.rank(), len = x.dims()[dim];
    // Move `dim` last, then add the j axis: pairs [..., i, j].
    std::vector<int64_t> perm;
    for (int64_t a = 0; a < r; ++a)
      if (a != dim) perm.push_back(a);
    perm.push_back(dim);
    Value xt = b.transpose(x, perm);
    std::vector<int64_t> pd = xt.dims();
    pd.push_back(len);
    std::vector<int64_t> keep;
    for (int64_t a = 0; a < r - 1; ++a) keep.push_back(a);
    keep.push_back(r);  // x's element j sits on the last axis
    Value xj = b.broadcast_in_dim(xt, pd, keep);
    Value i = b.iota({ElemType::S64, pd}, r - 1), j = b.iota({ElemType::S64, pd}, r);
    Value valid = b.compare(j, i, Cmp::LE);
    bool fl = hlo::is_float(x.elem());
    Value init_v;
    if (fl) {
      init_v = b.constant_f((is_max ? -1 : 1) * std::numeric_limits<double>::infinity(), x.elem());
    } else if (x.elem() == ElemType::PRED) {
      init_v = b.constant_i(is_max ? 0 : 1, x.elem());
    } else {
      int bits = hlo::bit_width(x.elem());
      bool u = hlo::is_unsigned_int(x.elem());
      int64_t lo = u ? 0 : (bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1)));
      int64_t hi = u ? (bits >= 64 ? -1 : (int64_t{1} << bits) - 1)
                     : (bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1);
      init_v = b.constant_i(is_max ? lo : hi, x.elem());
    }
    Value xs = b.select(valid, xj, b.broadcast_to(init_v, pd));
    Value js = b.select(valid, j, b.splat_i(-1, j.type));
    auto res = b.reduce({xs, js}, {init_v, b.constant_i(-1, ElemType::S64)}, {r},
                        [is_max, fl](hlo::Builder& rb, const std::vector<Value>& a) {
      Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
      Value no = rb.compare(ai, ai, Cmp::NE);  // a constant false of the right shape
      Value a_nan = fl ? rb.compare(av, av, Cmp::NE) : no;
      Value b_nan = fl ? rb.compare(bv, bv, Cmp::NE) : no;
      Value a_better = rb.compare(av, bv, is_max ? Cmp::GT : Cmp::LT);
      Value later = rb.compare(ai, bi, Cmp::GT);
      Value tie_later = rb.binary("and", rb.compare(av, bv, Cmp::EQ), later);
      // NaN wins (the later of two NaNs); else the better value; on ties the later index.
      Value pick_a = rb.select(a_nan, rb.binary("or", rb.unary("not", b_nan), later),
                               rb.select(b_nan, no, rb.binary("or", a_better, tie_later)));
      return std::vector<Value>{rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
    });
    std::vector<int64_t> inv(r);
    for (int64_t a = 0; a < r; ++a) inv[perm[a]] = a;
    return {b.transpose(res[0], inv), b.transpose(res[1], inv)};
  };
}

}  // namespace

void register_cumulative() {
  add("cummax", cum_extreme(true));
  add("cummin", cum_extreme(false));
}

}  // namespace tpu::lower

// Selection and scans: argmax/argmin, max.dim/min.dim, topk, sort, kthvalue,
// cumsum / cumprod, logsumexp, all/any, isnan/isinf family.
//
// Arg-reductions follow PyTorch: NaN counts as the extreme value and ties go
// to the lowest index. Sorting puts NaN last ascending (first descending), and
// is stable so equal keys keep their index order.
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// x != x: true only for NaN (always false for integers).
Value isnan(hlo::Builder& b, Value v) { return b.compare(v, v, Cmp::NE); }

// (value, index) of the max (or min) along `dim`, keepdim optional.
std::pair<Value, Value> arg_reduce(hlo::Builder& b, Value x, int64_t dim, bool keepdim, bool is_max) {
  bool fl = hlo::is_float(x.elem());
  if (x.elem() == ElemType::PRED) x = b.convert(x, ElemType::U8);
  Value iota = b.iota({ElemType::S64, x.dims()}, dim);
  Value init_v = extreme_value(b, x.elem(), !is_max);
  Value init_i = b.constant_i(std::numeric_limits<int64_t>::max(), ElemType::S64);
  auto r = b.reduce({x, iota}, {init_v, init_i}, {dim},
                    [is_max, fl](hlo::Builder& b, const std::vector<Value>& a) -> std::vector<Value> {
                      Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
                      Value lower_i = b.compare(ai, bi, Cmp::LT);
                      Value beats = b.compare(av, bv, is_max ? Cmp::GT : Cmp::LT);
                      Value tie = b.binary("and", b.compare(av, bv, Cmp::EQ), lower_i);
                      Value pick = b.binary("or", beats, tie);
                      if (fl) {
                        Value an = b.compare(av, av, Cmp::NE), bn = b.compare(bv, bv, Cmp::NE);
                        Value a_nan_wins = b.binary("or", b.unary("not", bn), lower_i);
                        pick = b.select(an, a_nan_wins, b.binary("and", b.unary("not", bn), pick));
                      }
                      return {b.select(pick, av, bv), b.select(pick, ai, bi)};
                    });
  Value v = r[0], i = r[1];
  if (keepdim) {
    std::vector<int64_t> kd = x.dims();
    kd[dim] = 1;
    v = b.reshape(v, kd);
    i = b.reshape(i, kd);
  }
  return {v, i};
}

// argmax/argmin(self, dim?, keepdim)
LowerFn arg_op(bool is_max) {
  return [is_max](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    bool keepdim = c.bool_arg(2);
    if (c.is_none(1)) {
      Value flat = c.b.reshape(x, {x.type.numel()});
      Value i = arg_reduce(c.b, flat, 0, false, is_max).second;
      if (keepdim) i = c.b.reshape(i, std::vector<int64_t>(x.rank(), 1));
      return {i};
    }
    if (x.rank() == 0) return {c.b.constant_i(0, ElemType::S64)};
    return {arg_reduce(c.b, x, wrap_dim(c.int_arg(1), x.rank()), keepdim, is_max).second};
  };
}

// max.dim/min.dim(self, dim, keepdim) -> (values, indices)
LowerFn val_arg_op(bool is_max) {
  return [is_max](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    if (x.rank() == 0) return {x, c.b.constant_i(0, ElemType::S64)};
    auto [v, i] = arg_reduce(c.b, x, wrap_dim(c.int_arg(1), x.rank()), c.bool_arg(2), is_max);
    return {cast(c.b, v, x.elem()), i};
  };
}

// cumsum/cumprod(self, dim, dtype?): an inclusive prefix scan as a reduce_window.
LowerFn scan(hlo::ReduceOp op) {
  return [op](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    c10::ScalarType out = c.out_meta().empty() ? c.dtype(0) : c.out_dtype(0);
    if (auto d = c.opt_dtype(2)) out = *d;
    ElemType t = opmath(to_elem(out));
    Value x = cast(b, c.tensor(0), t);
    if (x.rank() == 0) return {x};
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    int64_t n = x.dims()[dim];
    std::vector<int64_t> win(x.rank(), 1), ones(x.rank(), 1);
    win[dim] = n;
    std::vector<std::pair<int64_t, int64_t>> pads(x.rank(), {0, 0});
    pads[dim] = {n - 1, 0};
    if (n == 0) return {x};
    int64_t ident = op == hlo::ReduceOp::Mul ? 1 : 0;
    Value init = hlo::is_float(t) ? b.constant_f(static_cast<double>(ident), t) : b.constant_i(ident, t);
    return {b.reduce_window(x, init, win, ones, ones, ones, pads, op)};
  };
}

std::vector<int64_t> dims_or_all(const Ctx& c, size_t i, int64_t rank) {
  std::vector<int64_t> d = c.is_none(i) ? std::vector<int64_t>{} : c.ints(i);
  if (d.empty()) return iota_dims(0, rank);
  return wrap_dims(d, rank);
}

// all/any over `dims` (PRED result; the caller converts to uint8 for uint8 input).
Value logical_reduce(hlo::Builder& b, Value x, const std::vector<int64_t>& dims, bool keepdim, bool all) {
  Value p = cast(b, x, ElemType::PRED);
  if (p.rank() == 0) return p;
  Value r = b.reduce(p, b.constant_i(all ? 1 : 0, ElemType::PRED), dims,
                     all ? hlo::ReduceOp::And : hlo::ReduceOp::Or);
  if (!keepdim) return r;
  std::vector<int64_t> kd = p.dims();
  for (int64_t d : dims) kd[d] = 1;
  return b.reshape(r, kd);
}

LowerFn logical_op(bool all, int form) {  // form 0: full, 1: .dim, 2: .dims
  return [all, form](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    std::vector<int64_t> dims;
    bool keepdim = false;
    if (form == 0) {
      dims = iota_dims(0, x.rank());
    } else if (form == 1) {
      dims = {wrap_dim(c.int_arg(1), x.rank())};
      keepdim = c.bool_arg(2);
    } else {
      dims = dims_or_all(c, 1, x.rank());
      keepdim = c.bool_arg(2);
    }
    if (x.rank() == 0) dims.clear();
    return {logical_reduce(c.b, x, dims, keepdim, all)};
  };
}

LowerFn float_test(std::function<Value(hlo::Builder&, Value)> f) {
  return [f](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    if (!hlo::is_float(x.elem())) return {c.b.splat_i(0, {ElemType::PRED, x.dims()})};
    return {f(c.b, x)};
  };
}

}  // namespace

void register_selection() {
  add("argmax", arg_op(true));
  add("argmin", arg_op(false));
  add("max.dim", val_arg_op(true));
  add("min.dim", val_arg_op(false));
  // sort.stable(self, stable?, dim, descending) -> (values, indices)
  add("sort.stable", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    if (x.rank() == 0) return {x, c.b.constant_i(0, ElemType::S64)};
    auto [v, i] = sort_with_index(c.b, x, wrap_dim(c.int_arg(2), x.rank()), c.bool_arg(3));
    return {v, i};
  });
  // topk(self, k, dim, largest, sorted) -> (values, indices); always sorted.
  add("topk", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    int64_t k = c.int_arg(1);
    if (x.rank() == 0) return {x, b.constant_i(0, ElemType::S64)};
    int64_t dim = wrap_dim(c.int_arg(2), x.rank());
    auto [v, i] = sort_with_index(b, x, dim, c.bool_arg(3));
    std::vector<int64_t> start(x.rank(), 0), lim = x.dims(), step(x.rank(), 1);
    lim[dim] = k;
    return {b.slice(v, start, lim, step), b.slice(i, start, lim, step)};
  });
  // kthvalue(self, k, dim, keepdim): the k-th smallest from an ascending stable
  // sort. (median and nanmedian, which treat NaN specially, are in order_stats.cc.)
  auto kth = [](Ctx& c, Value x, int64_t k, int64_t dim_arg, bool keepdim) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    if (x.rank() == 0) return {x, b.constant_i(0, ElemType::S64)};
    int64_t dim = wrap_dim(dim_arg, x.rank());
    auto [v, i] = sort_with_index(b, x, dim, false);
    std::vector<int64_t> start(x.rank(), 0), lim = x.dims(), step(x.rank(), 1);
    start[dim] = k;
    lim[dim] = k + 1;
    std::vector<int64_t> od = x.dims();
    if (keepdim) od[dim] = 1;
    else od.erase(od.begin() + dim);
    return {b.reshape(b.slice(v, start, lim, step), od), b.reshape(b.slice(i, start, lim, step), od)};
  };
  add("kthvalue", [kth](Ctx& c) -> std::vector<Value> {
    return kth(c, c.tensor(0), c.int_arg(1) - 1, c.int_arg(2), c.bool_arg(3));
  });
  add("cumsum", scan(hlo::ReduceOp::Add));
  add("cumprod", scan(hlo::ReduceOp::Mul));
  // logsumexp(self, dim, keepdim); a fully -inf (or +inf) slice keeps its value.
  add("logsumexp", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
    bool keepdim = c.bool_arg(2);
    if (x.rank() == 0) return {x};
    auto dims = dims_or_all(c, 1, x.rank());
    Value m = reduce_max(b, x, dims, true);
    Value inf = b.splat_f(std::numeric_limits<double>::infinity(), m.type);
    Value m0 = b.select(b.compare(b.unary("abs", m), inf, Cmp::EQ), zeros_like(b, m), m);
    Value s = reduce_sum(b, b.unary("exponential", b.sub(x, bcast(b, m0, x.dims()))), dims, true);
    Value r = b.add(b.unary("log", s), m0);
    if (!keepdim) {
      std::vector<int64_t> od;
      for (int64_t d = 0; d < x.rank(); ++d)
        if (std::find(dims.begin(), dims.end(), d) == dims.end()) od.push_back(x.dims()[d]);
      r = b.reshape(r, od);
    }
    return {r};
  });
  add("all", logical_op(true, 0));
  add("any", logical_op(false, 0));
  add("all.dim", logical_op(true, 1));
  add("any.dim", logical_op(false, 1));
  add("all.dims", logical_op(true, 2));
  add("any.dims", logical_op(false, 2));
  add("isnan", float_test([](hlo::Builder& b, Value x) { return isnan(b, x); }));
  add("isinf", float_test([](hlo::Builder& b, Value x) {
    return b.compare(b.unary("abs", x), b.splat_f(std::numeric_limits<double>::infinity(), x.type), Cmp::EQ);
  }));
  add("isposinf", float_test([](hlo::Builder& b, Value x) {
    return b.compare(x, b.splat_f(std::numeric_limits<double>::infinity(), x.type), Cmp::EQ);
  }));
  add("isneginf", float_test([](hlo::Builder& b, Value x) {
    return b.compare(x, b.splat_f(-std::numeric_limits<double>::infinity(), x.type), Cmp::EQ);
  }));
}

}  // namespace tpu::lower

// Reductions: sum, mean, prod, amax/amin. Accumulate in opmath of the result type.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

std::vector<int64_t> reduce_dims(const Ctx& c, size_t i, int64_t rank) {
  std::vector<int64_t> dims = c.is_none(i) ? std::vector<int64_t>{} : c.ints(i);
  if (rank == 0) {
    wrap_dims(dims, rank);  // validates: a 0-dim tensor accepts dim 0 and -1
    return {};
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  return wrap_dims(dims, rank);
}

std::vector<int64_t> all_dims(int64_t rank) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  return dims;
}

c10::ScalarType sum_type(const Ctx& c, size_t self, std::optional<c10::ScalarType> dtype) {
  if (dtype) return *dtype;
  c10::ScalarType t = c.dtype(self);
  return c10::isIntegralType(t, true) ? c10::ScalarType::Long : t;
}

Value sum_over(Ctx& c, c10::ScalarType out, const std::vector<int64_t>& dims, bool keepdim) {
  ElemType acc = opmath(to_elem(out));
  return reduce_sum(c.b, cast(c.b, c.tensor(0), acc), dims, keepdim);
}

Value one(hlo::Builder& b, ElemType t) {
  return hlo::is_float(t) || hlo::is_complex(t) ? b.constant_f(1, t) : b.constant_i(1, t);
}

Value mean_over(Ctx& c, c10::ScalarType out, const std::vector<int64_t>& dims, bool keepdim) {
  ElemType acc = opmath(to_elem(out));
  Value x = cast(c.b, c.tensor(0), acc);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims().at(d);
  Value s = reduce_sum(c.b, x, dims, keepdim);
  return c.b.div(s, scalar_like(c.b, static_cast<double>(n), s));
}

}  // namespace

void register_reductions() {
  add("sum.dim_IntList", [](Ctx& c) -> std::vector<Value> {
    auto dims = reduce_dims(c, 1, c.tensor(0).rank());
    return {sum_over(c, sum_type(c, 0, c.opt_dtype(3)), dims, c.bool_arg(2))};
  });
  add("sum", [](Ctx& c) -> std::vector<Value> {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < c.tensor(0).rank(); ++d) dims.push_back(d);
    return {sum_over(c, sum_type(c, 0, c.opt_dtype(1)), dims, false)};
  });
  add("mean.dim", [](Ctx& c) -> std::vector<Value> {
    auto dims = reduce_dims(c, 1, c.tensor(0).rank());
    return {mean_over(c, c.opt_dtype(3).value_or(c.dtype(0)), dims, c.bool_arg(2))};
  });
  add("mean", [](Ctx& c) -> std::vector<Value> {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < c.tensor(0).rank(); ++d) dims.push_back(d);
    return {mean_over(c, c.opt_dtype(1).value_or(c.dtype(0)), dims, false)};
  });
  add("amax", [](Ctx& c) -> std::vector<Value> {
    auto dims = reduce_dims(c, 1, c.tensor(0).rank());
    return {reduce_extreme_nan(c.b, c.tensor(0), dims, c.bool_arg(2), true)};
  });
  add("amin", [](Ctx& c) -> std::vector<Value> {
    auto dims = reduce_dims(c, 1, c.tensor(0).rank());
    return {reduce_extreme_nan(c.b, c.tensor(0), dims, c.bool_arg(2), false)};
  });
  // prod(self, dtype?) / prod.dim_int(self, dim, keepdim, dtype?): integer and
  // bool inputs multiply in int64, like sum.
  add("prod", [](Ctx& c) -> std::vector<Value> {
    c10::ScalarType out = sum_type(c, 0, c.opt_dtype(1));
    Value x = cast(c.b, c.tensor(0), opmath(to_elem(out)));
    return {c.b.reduce(x, one(c.b, x.elem()), all_dims(x.rank()), hlo::ReduceOp::Mul)};
  });
  add("prod.dim_int", [](Ctx& c) -> std::vector<Value> {
    c10::ScalarType out = sum_type(c, 0, c.opt_dtype(3));
    Value x = cast(c.b, c.tensor(0), opmath(to_elem(out)));
    if (x.rank() == 0) return {x};
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    Value r = c.b.reduce(x, one(c.b, x.elem()), {dim}, hlo::ReduceOp::Mul);
    if (c.bool_arg(2)) {
      std::vector<int64_t> kd = x.dims();
      kd[dim] = 1;
      r = c.b.reshape(r, kd);
    }
    return {r};
  });
  // Full reductions (print() calls these to pick a number format).
  add("max", [](Ctx& c) -> std::vector<Value> {
    return {reduce_extreme_nan(c.b, c.tensor(0), all_dims(c.tensor(0).rank()), false, true)};
  });
  add("min", [](Ctx& c) -> std::vector<Value> {
    return {reduce_extreme_nan(c.b, c.tensor(0), all_dims(c.tensor(0).rank()), false, false)};
  });
}

}  // namespace tpu::lower

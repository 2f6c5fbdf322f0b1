// Moments and norms: var / std / var_mean / std_mean (correction forms) and
// linalg_vector_norm. Two-pass variance in opmath; the correction is a
// runtime scalar (None means 1), the norm order is structural.
#include <cmath>
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

std::vector<int64_t> dims_arg(const Ctx& c, size_t i, int64_t rank) {
  std::vector<int64_t> d = c.is_none(i) ? std::vector<int64_t>{} : c.ints(i);
  if (d.empty()) return iota_dims(0, rank);
  return wrap_dims(d, rank);
}

std::vector<int64_t> drop_dims(const std::vector<int64_t>& shape, const std::vector<int64_t>& dims) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) out.push_back(shape[d]);
  return out;
}

struct Moments {
  Value var, mean;
};

// (self, dim?, *, correction?, keepdim)
Moments var_mean(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
  auto dims = x.rank() == 0 ? std::vector<int64_t>{} : dims_arg(c, 1, x.rank());
  bool keepdim = c.bool_arg(3);
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dims()[d];
  Value nv = b.constant_f(static_cast<double>(n), x.elem());
  Value mean = x;
  if (x.rank() > 0) {
    std::vector<int64_t> kd = x.dims();
    for (int64_t d : dims) kd[d] = 1;
    mean = b.div(reduce_sum(b, x, dims, true), bcast(b, nv, kd));
  }
  Value xc = b.sub(x, bcast(b, mean, x.dims()));
  Value ss = x.rank() == 0 ? b.mul(xc, xc) : reduce_sum(b, b.mul(xc, xc), dims, true);
  Value corr = c.is_none(2) ? b.constant_f(1, x.elem()) : c.scalar(2, x.elem());
  Value den = b.max(b.sub(nv, corr), b.constant_f(0, x.elem()));
  Value var = b.div(ss, bcast(b, den, ss.dims()));
  if (!keepdim) {
    auto od = drop_dims(x.dims(), dims);
    var = b.reshape(var, od);
    mean = b.reshape(mean, od);
  }
  return {var, mean};
}

// linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?)
std::vector<Value> vector_norm(Ctx& c) {
  hlo::Builder& b = c.b;
  c10::ScalarType out = c.opt_dtype(4).value_or(c.dtype(0));
  Value x = b.unary("abs", cast(b, c.tensor(0), opmath(to_elem(out))));
  double ord = c.double_arg(1);
  bool keepdim = c.bool_arg(3);
  auto dims = x.rank() == 0 ? std::vector<int64_t>{} : dims_arg(c, 2, x.rank());
  if (x.rank() == 0) return {ord == 0 ? cast(b, b.compare(x, zeros_like(b, x), Cmp::NE), x.elem()) : x};
  if (std::isinf(ord)) return {reduce_extreme_nan(b, x, dims, keepdim, ord > 0)};
  if (ord == 0)
    return {reduce_sum(b, cast(b, b.compare(x, zeros_like(b, x), Cmp::NE), x.elem()), dims, keepdim)};
  if (ord == 1) return {reduce_sum(b, x, dims, keepdim)};
  if (ord == 2) return {b.unary("sqrt", reduce_sum(b, b.mul(x, x), dims, keepdim))};
  Value p = scalar_like(b, ord, x);
  Value s = reduce_sum(b, b.binary("power", x, p), dims, keepdim);
  return {b.binary("power", s, scalar_like(b, 1.0 / ord, s))};
}

}  // namespace

void register_statistics() {
  add("var.correction", [](Ctx& c) -> std::vector<Value> { return {var_mean(c).var}; });
  add("std.correction", [](Ctx& c) -> std::vector<Value> {
    return {c.b.unary("sqrt", var_mean(c).var)};
  });
  add("var_mean.correction", [](Ctx& c) -> std::vector<Value> {
    Moments m = var_mean(c);
    return {m.var, m.mean};
  });
  add("std_mean.correction", [](Ctx& c) -> std::vector<Value> {
    Moments m = var_mean(c);
    return {c.b.unary("sqrt", m.var), m.mean};
  });
  add("linalg_vector_norm", vector_norm, {1});
}

}  // namespace tpu::lower

// Pairwise distances: _cdist_forward / _cdist_backward and _pdist_forward /
// _pdist_backward. The norm order p is structural (it picks the formula), so it
// is a static argument; compute_mode only selects an algorithm on CPU and is
// accepted and ignored (torch.cdist routes its matmul path to _euclidean_dist,
// a composite op, before reaching here).
//
// Every pair's difference vector is materialised ([*, P, R, M] for cdist,
// [K, M] for pdist) and reduced over M; the gradients are PyTorch's per-p
// formulas summed over the partner rows (cdist) or scatter-added to both rows
// of each pair (pdist).
#include <cmath>
#include <limits>

#include "lower/rows.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// ||diff||_p over the last dim.
Value norm_last(hlo::Builder& b, Value diff, double p) {
  int64_t last = diff.rank() - 1;
  Value a = b.unary("abs", diff);
  if (p == 0) {
    Value nz = b.compare(diff, zeros_like(b, diff), Cmp::NE);
    return reduce_sum(b, b.convert(nz, diff.elem()), {last}, false);
  }
  if (p == 1) return reduce_sum(b, a, {last}, false);
  if (p == 2) return b.unary("sqrt", reduce_sum(b, b.mul(diff, diff), {last}, false));
  if (std::isinf(p)) {
    // An empty vector has norm 0, not max's identity -inf.
    if (diff.dims()[last] == 0) return reduce_sum(b, a, {last}, false);
    return reduce_max(b, a, {last}, false);
  }
  Value s = reduce_sum(b, b.binary("power", a, scalar_like(b, p, a)), {last}, false);
  return b.binary("power", s, scalar_like(b, 1.0 / p, s));
}

// d dist / d diff times the incoming gradient, elementwise; g and d are
// already broadcast to diff's shape. Mirrors PyTorch's CPU kernels, including
// where they define the gradient as 0 (zero distance, p < 1 at zero diff).
Value dist_grad(hlo::Builder& b, Value diff, Value g, Value d, double p) {
  Value zero = zeros_like(b, diff);
  if (p == 0) return zero;
  Value sgn = b.unary("sign", diff);
  if (p == 1) return b.mul(g, sgn);
  Value a = b.unary("abs", diff);
  Value d_zero = b.compare(d, zero, Cmp::EQ);
  if (std::isinf(p)) return b.select(b.compare(a, d, Cmp::EQ), b.mul(g, sgn), zero);
  if (p == 2) return b.select(d_zero, zero, b.div(b.mul(g, diff), d));
  Value dp = b.binary("power", d, scalar_like(b, p - 1, d));
  if (p < 2) {
    Value v = b.div(b.mul(b.mul(sgn, b.binary("power", a, scalar_like(b, p - 1, a))), g), dp);
    Value skip = d_zero;
    if (p < 1) skip = b.binary("or", skip, b.compare(diff, zero, Cmp::EQ));
    return b.select(skip, zero, v);
  }
  Value v = b.div(b.mul(b.mul(diff, b.binary("power", a, scalar_like(b, p - 2, a))), g), dp);
  return b.select(d_zero, zero, v);
}

// Batch dims of cdist: the broadcast of both inputs' leading dims.
std::vector<int64_t> cdist_batch(Value x1, Value x2) {
  return hlo::broadcast_shapes(leading_dims(x1), leading_dims(x2));
}

// x1 [*, P, M], x2 [*, R, M] -> x1_i - x2_j as [*batch, P, R, M].
Value cdist_diff(hlo::Builder& b, Value x1, Value x2, const std::vector<int64_t>& batch) {
  int64_t nb = static_cast<int64_t>(batch.size());
  int64_t p = x1.dims()[x1.rank() - 2], r = x2.dims()[x2.rank() - 2], m = x1.dims().back();
  auto with = [&](std::vector<int64_t> tail) {
    auto d = batch;
    d.insert(d.end(), tail.begin(), tail.end());
    return d;
  };
  std::vector<int64_t> lead = iota_dims(0, nb);
  auto map1 = lead, map2 = lead;
  map1.insert(map1.end(), {nb, nb + 2});
  map2.insert(map2.end(), {nb + 1, nb + 2});
  Value a = b.broadcast_in_dim(b.broadcast_to(x1, with({p, m})), with({p, r, m}), map1);
  Value c = b.broadcast_in_dim(b.broadcast_to(x2, with({r, m})), with({p, r, m}), map2);
  return b.sub(a, c);
}

// _cdist_forward(x1, x2, float p, int? compute_mode)
std::vector<Value> cdist_forward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value x1 = cast(b, c.tensor(0), t), x2 = cast(b, c.tensor(1), t);
  double p = c.double_arg(2);
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  return {fit_meta(c, 0, norm_last(b, cdist_diff(b, x1, x2, cdist_batch(x1, x2)), p))};
}

// _cdist_backward(grad, x1, x2, float p, cdist): the gradient for x1 at the
// broadcast batch shape (autograd reduces it to x1's shape; x2's gradient is
// this op with the roles swapped).
std::vector<Value> cdist_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value g = cast(b, c.tensor(0), t), x1 = cast(b, c.tensor(1), t), x2 = cast(b, c.tensor(2), t);
  Value d = cast(b, c.tensor(4), t);
  double p = c.double_arg(3);
  auto batch = cdist_batch(x1, x2);
  Value diff = cdist_diff(b, x1, x2, batch);
  int64_t last = diff.rank() - 1;
  std::vector<int64_t> keep = iota_dims(0, last);
  Value gb = b.broadcast_in_dim(b.broadcast_to(g, {diff.dims().begin(), diff.dims().end() - 1}),
                                diff.dims(), keep);
  Value db = b.broadcast_in_dim(b.broadcast_to(d, {diff.dims().begin(), diff.dims().end() - 1}),
                                diff.dims(), keep);
  Value gx = reduce_sum(b, dist_grad(b, diff, gb, db, p), {last - 1}, false);
  // With an empty operand PyTorch returns zeros of x1's own (unbroadcast) shape.
  const auto& m = c.out_meta();
  if (gx.type.numel() == 0 && !m.empty() && numel_of(m[0].sizes) != 0)
    return {b.splat_f(0, {t, m[0].sizes})};
  return {fit_meta(c, 0, gx)};
}

// Row pairs (i, j), i < j, in pdist's row-major order.
std::pair<std::vector<int64_t>, std::vector<int64_t>> pairs(int64_t n) {
  std::vector<int64_t> is, js;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) {
      is.push_back(i);
      js.push_back(j);
    }
  return {is, js};
}

// x [N, M] -> (x_i - x_j) for every pair, [K, M], with the pair index lists.
struct PairDiff {
  Value diff, i, j;
  int64_t k = 0;
};
PairDiff pair_diff(hlo::Builder& b, Value x) {
  auto [is, js] = pairs(x.dims()[0]);
  PairDiff r;
  r.k = static_cast<int64_t>(is.size());
  if (r.k == 0) return r;
  r.i = b.dense_i(is, {ElemType::S64, {r.k}});
  r.j = b.dense_i(js, {ElemType::S64, {r.k}});
  r.diff = b.sub(rows::take(b, x, r.i), rows::take(b, x, r.j));
  return r;
}

// _pdist_forward(self, float p)
std::vector<Value> pdist_forward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(0));
  Value x = cast(b, c.tensor(0), t);
  double p = c.double_arg(1);
  TORCH_CHECK(p >= 0, "pdist only supports non-negative p values");
  PairDiff pd = pair_diff(b, x);
  if (pd.k == 0) return {b.splat_f(0, {t, {0}})};
  return {norm_last(b, pd.diff, p)};
}

// _pdist_backward(grad, self, float p, pdist): each pair's gradient goes to
// row i and, negated, to row j.
std::vector<Value> pdist_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType t = float_opmath(c.dtype(1));
  Value x = cast(b, c.tensor(1), t);
  double p = c.double_arg(2);
  Value acc = b.splat_f(0, {t, x.dims()});
  PairDiff pd = pair_diff(b, x);
  if (pd.k == 0 || x.dims()[1] == 0) return {acc};
  const auto& dd = pd.diff.dims();
  Value g = b.broadcast_in_dim(cast(b, c.tensor(0), t), dd, {0});
  Value d = b.broadcast_in_dim(cast(b, c.tensor(3), t), dd, {0});
  Value part = dist_grad(b, pd.diff, g, d, p);
  Value idx = b.concatenate({pd.i, pd.j}, 0);
  return {rows::scatter_add(b, acc, idx, b.concatenate({part, b.neg(part)}, 0))};
}

}  // namespace

void register_distance() {
  add("_cdist_forward", cdist_forward, {2});
  add("_cdist_backward", cdist_backward, {3});
  add("_pdist_forward", pdist_forward, {1});
  add("_pdist_backward", pdist_backward, {2});
}

}  // namespace tpu::lower

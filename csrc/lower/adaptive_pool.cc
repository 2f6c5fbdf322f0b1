// Adaptive pooling beyond pooling.cc's 2-d average: _adaptive_avg_pool3d
// (+ backward) and adaptive_max_pool{2,3}d (+ backward). Inputs are
// [N, C, *sp] or [C, *sp]; bin i of an axis covers
// [floor(i*in/out), ceil((i+1)*in/out)).
//
// Average pooling is one constant averaging matrix per spatial axis.
// Max pooling walks the offsets of the widest bin box in row-major order,
// keeping "strictly greater, or NaN" (PyTorch's rule: the first maximum wins,
// a NaN wins). Each offset's values are gathered along each spatial axis;
// its flat plane indices are a host constant (an earlier separable version
// gathered a constant index tensor per axis, and the XLA CPU compiler
// scrambled rows of the selected indices). Bins narrower than the widest
// repeat their last position, which can neither win a strict comparison nor
// move a NaN's index past PyTorch's.
#include "lower/rows.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

// [out, in] matrix whose row i averages bin i.
Value avg_matrix(hlo::Builder& b, int64_t in, int64_t out, ElemType t) {
  std::vector<double> v(static_cast<size_t>(in * out), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    int64_t s = bin_start(i, in, out), e = bin_end(i, in, out);
    for (int64_t k = s; k < e; ++k) v[static_cast<size_t>(i * in + k)] = 1.0 / static_cast<double>(e - s);
  }
  return b.dense_f(v, {t, {out, in}});
}

// Contracts axis `axis` of x with the columns of m [rows, x.dims()[axis]],
// leaving the rows in the axis' place.
Value apply_axis(hlo::Builder& b, Value x, Value m, int64_t axis) {
  Value y = b.dot_general(x, m, {}, {}, {axis}, {1}, x.elem());  // axis moved last
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.rank() - 1; ++d) {
    if (d == axis) perm.push_back(x.rank() - 1);
    perm.push_back(d);
  }
  if (axis == x.rank() - 1) perm.push_back(x.rank() - 1);
  return b.transpose(y, perm);
}

// _adaptive_avg_pool3d(self, output_size)
std::vector<Value> avg_pool3d(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
  auto os = c.ints(1);
  for (int64_t a = 0; a < 3; ++a) {
    int64_t axis = x.rank() - 3 + a;
    x = apply_axis(b, x, avg_matrix(b, x.dims()[axis], os[a], x.elem()), axis);
  }
  return {x};
}

// _adaptive_avg_pool3d_backward(grad_output, self): the transposed matrices.
std::vector<Value> avg_pool3d_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  Value self = c.tensor(1);
  Value g = cast(b, c.tensor(0), float_opmath(c.dtype(1)));
  for (int64_t a = 0; a < 3; ++a) {
    int64_t axis = g.rank() - 3 + a;
    Value m = avg_matrix(b, self.dims()[axis], g.dims()[axis], g.elem());
    g = apply_axis(b, g, b.transpose(m, {1, 0}), axis);
  }
  return {g};
}

// Position along an axis that offset k of bin i reads; bins narrower than
// the widest repeat their last position.
std::vector<int64_t> bin_positions(int64_t in, int64_t out, int64_t k) {
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < out; ++i) pos.push_back(std::min(bin_start(i, in, out) + k, bin_end(i, in, out) - 1));
  return pos;
}

int64_t bin_width(int64_t in, int64_t out) {
  int64_t width = 0;
  for (int64_t i = 0; i < out; ++i) width = std::max(width, bin_end(i, in, out) - bin_start(i, in, out));
  return width;
}

// adaptive_max_pool{n}d(self, output_size) -> (values, int64 flat indices)
LowerFn max_pool(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    auto os = c.ints(1);
    TORCH_CHECK(static_cast<int64_t>(os.size()) == n, "adaptive_max_pool", n,
                "d: output_size must have ", n, " elements");
    int64_t r = x.rank();
    std::vector<int64_t> in(x.dims().end() - n, x.dims().end()), od = x.dims();
    for (int64_t a = 0; a < n; ++a) od[r - n + a] = os[a];
    // Every offset of the (widest) box in row-major order; the candidate's
    // flat plane index is a host constant, its value a gather per axis.
    std::vector<std::vector<int64_t>> offs = {{}};
    for (int64_t a = 0; a < n; ++a) {
      std::vector<std::vector<int64_t>> next;
      for (const auto& o : offs)
        for (int64_t k = 0; k < bin_width(in[a], os[a]); ++k) {
          auto e = o;
          e.push_back(k);
          next.push_back(e);
        }
      offs = next;
    }
    Value best, best_i;
    for (const auto& o : offs) {
      Value cand = x;
      std::vector<std::vector<int64_t>> pos;
      for (int64_t a = 0; a < n; ++a) {
        pos.push_back(bin_positions(in[a], os[a], o[a]));
        cand = rows::take_along(b, cand, r - n + a, pos[a]);
      }
      std::vector<int64_t> flat(static_cast<size_t>(numel_of(os)), 0);
      for (size_t f = 0; f < flat.size(); ++f) {
        int64_t rem = static_cast<int64_t>(f), v = 0, stride = 1;
        for (int64_t a = n - 1; a >= 0; --a) {
          v += pos[a][rem % os[a]] * stride;
          rem /= os[a];
          stride *= in[a];
        }
        flat[f] = v;
      }
      Value ci = b.broadcast_to(b.dense_i(flat, {ElemType::S64, os}), od);
      if (!best.valid()) {
        best = cand;
        best_i = ci;
        continue;
      }
      Value better = b.compare(cand, best, Cmp::GT);
      if (hlo::is_float(x.elem())) better = b.binary("or", better, b.compare(cand, cand, Cmp::NE));
      best = b.select(better, cand, best);
      best_i = b.select(better, ci, best_i);
    }
    return {best, best_i};
  };
}

// adaptive_max_pool{n}d_backward(grad_output, self, indices): each output's
// gradient is added at its recorded position of its own plane.
LowerFn max_pool_backward(int64_t n) {
  return [n](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value self = c.tensor(1);
    ElemType t = float_opmath(c.dtype(1));
    Value g = cast(b, c.tensor(0), t);
    Value idx = cast(b, c.tensor(2), ElemType::S64);
    std::vector<int64_t> lead(self.dims().begin(), self.dims().end() - n);
    std::vector<int64_t> in_sp(self.dims().end() - n, self.dims().end());
    std::vector<int64_t> out_sp(g.dims().end() - n, g.dims().end());
    int64_t planes = numel_of(lead), plane = numel_of(in_sp), outs = numel_of(out_sp);
    Value acc = b.splat_f(0, {t, {planes * plane, 1}});
    if (planes * outs == 0 || plane == 0) return {b.reshape(acc, self.dims())};
    // Flat position = plane number * plane size + index within the plane.
    Value base = b.mul(b.iota({ElemType::S64, {planes, outs}}, 0),
                       b.splat_i(plane, {ElemType::S64, {planes, outs}}));
    Value flat = b.add(base, b.reshape(idx, {planes, outs}));
    acc = rows::scatter_add(b, acc, b.reshape(flat, {planes * outs}),
                            b.reshape(g, {planes * outs, 1}));
    return {b.reshape(acc, self.dims())};
  };
}

}  // namespace

void register_adaptive_pool() {
  add("_adaptive_avg_pool3d", avg_pool3d);
  add("_adaptive_avg_pool3d_backward", avg_pool3d_backward);
  for (int64_t n : {2, 3}) {
    std::string d = std::to_string(n) + "d";
    add("adaptive_max_pool" + d, max_pool(n));
    add("adaptive_max_pool" + d + "_backward", max_pool_backward(n));
  }
}

}  // namespace tpu::lower

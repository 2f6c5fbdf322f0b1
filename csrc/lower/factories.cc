// Factories that reach the device as out= ops (PyTorch's composites allocate
// with empty() and fill through these): arange, eye; _efficientzerotensor; and
// tril_indices / triu_indices, computed on the device from the linear position.
#include <algorithm>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

// The points of linspace as PyTorch's CPU kernel computes them: in the result's
// float type (in double for integer results, from endpoints first converted to
// the integer type), the first half counted up from start and the second half
// down from end, so that both endpoints are exact.
Value evenly_spaced(Ctx& c, Value out) {
  hlo::Builder& b = c.b;
  const ElemType t = out.elem();
  const bool fl = hlo::is_float(t) || hlo::is_complex(t);
  const ElemType ct = fl ? t : ElemType::F64;
  const int64_t n = out.rank() == 1 ? out.dims()[0] : 0;
  auto endpoint = [&](size_t i) { return fl ? c.scalar(i, ct) : b.convert(c.scalar(i, t), ct); };
  Value start = endpoint(0), end = endpoint(1);
  if (n <= 1) return bcast(b, start, out.dims());
  Value step = b.div(b.sub(end, start), b.constant_f(static_cast<double>(n - 1), ct));
  hlo::TensorType it{ElemType::S64, out.dims()};
  Value idx = b.iota(it, 0);
  Value up = b.add(bcast(b, start, out.dims()), b.mul(bcast(b, step, out.dims()), b.convert(idx, ct)));
  Value back = b.convert(b.sub(b.splat_i(n - 1, it), idx), ct);
  Value down = b.sub(bcast(b, end, out.dims()), b.mul(bcast(b, step, out.dims()), back));
  Value first_half = b.compare(idx, b.splat_i(n / 2, it), hlo::Cmp::LT);
  return b.select(first_half, up, down);
}


// The shape of the lower triangle {(i, j) : j - i <= offset} of a row x col
// matrix in row-major order: rows before `first` are empty; from there `grow`
// rows have lengths first_len, first_len + 1, ... (a trapezoid of `trapezoid`
// elements), and the remaining rows are full (col elements each).
struct TrilShape {
  int64_t first = 0, first_len = 0, grow = 0, trapezoid = 0, count = 0;
};

TrilShape tril_shape(int64_t row, int64_t col, int64_t offset) {
  TrilShape s;
  offset = std::clamp(offset, -row, col);  // the same triangle; no overflow below
  s.first = std::max<int64_t>(0, -offset);
  if (row <= 0 || col <= 0 || s.first >= row) return s;
  s.first_len = std::min(col, s.first + offset + 1);
  s.grow = std::min(row - s.first, col - s.first_len);
  s.trapezoid = s.grow * s.first_len + s.grow * (s.grow - 1) / 2;
  s.count = s.trapezoid + (row - s.first - s.grow) * col;
  return s;
}

// The (row, column) of the lower-triangle elements at linear positions `x`
// (S64, rank 1, all < s.count). In the trapezoid, row k starts at
// S(k) = k*f + k(k-1)/2: k is the root of a quadratic, estimated in f64 and then
// corrected by one either way with exact integer arithmetic, so the result is
// exact for any size whose positions fit in S64. Past it, rows are col long.
std::pair<Value, Value> tril_coords(hlo::Builder& b, Value x, int64_t col, const TrilShape& s) {
  const std::vector<int64_t>& dims = x.dims();
  hlo::TensorType it{ElemType::S64, dims};
  auto I = [&](int64_t v) { return b.splat_i(v, it); };
  auto start_of = [&](Value k) {  // S(k), exact
    Value tri = b.div(b.mul(k, b.sub(k, I(1))), I(2));
    return b.add(b.mul(k, I(s.first_len)), tri);
  };
  const double f2 = 2.0 * static_cast<double>(s.first_len) - 1.0;
  hlo::TensorType ft{ElemType::F64, dims};
  Value disc = b.add(b.splat_f(f2 * f2, ft), b.mul(b.splat_f(8.0, ft), b.convert(x, ElemType::F64)));
  Value root = b.div(b.sub(b.unary("sqrt", disc), b.splat_f(f2, ft)), b.splat_f(2.0, ft));
  Value k = b.convert(b.unary("floor", root), ElemType::S64);
  k = b.clamp(b.constant_i(0, ElemType::S64), k, b.constant_i(std::max<int64_t>(s.grow - 1, 0), ElemType::S64));
  k = b.select(b.compare(start_of(k), x, hlo::Cmp::GT), b.sub(k, I(1)), k);
  k = b.select(b.compare(start_of(b.add(k, I(1))), x, hlo::Cmp::LE), b.add(k, I(1)), k);
  Value trap_j = b.sub(x, start_of(k));
  Value rest = b.max(b.sub(x, I(s.trapezoid)), I(0));
  Value rect_i = b.add(I(s.grow), b.div(rest, I(col)));
  Value rect_j = b.binary("remainder", rest, I(col));
  Value in_trap = b.compare(x, I(s.trapezoid), hlo::Cmp::LT);
  Value i = b.add(I(s.first), b.select(in_trap, k, rect_i));
  return {i, b.select(in_trap, trap_j, rect_j)};
}

// tril_indices / triu_indices(row, col, offset, *, dtype, ...) -> [2, count].
// The upper triangle {j - i >= offset} read backwards is the lower triangle
// {j' - i' <= col - row - offset} of the matrix flipped both ways
// (i' = row-1-i, j' = col-1-j), so triu reuses tril's coordinates.
Value triangle_indices(Ctx& c, bool upper) {
  hlo::Builder& b = c.b;
  const int64_t row = c.int_arg(0), col = c.int_arg(1), offset = c.int_arg(2);
  TORCH_CHECK(row >= 0 && col >= 0, upper ? "triu" : "tril", "_indices: row and col must be "
              "non-negative, got row=", row, ", col=", col);
  const int64_t off = std::clamp(offset, -row, col);  // the same triangle, no overflow
  const TrilShape s = tril_shape(row, col, upper ? col - row - off : off);
  c10::ScalarType st = c.opt_dtype(3).value_or(c10::ScalarType::Long);
  if (!c.out_meta().empty()) st = c.out_dtype(0);
  const ElemType t = to_elem(st);
  hlo::TensorType it{ElemType::S64, {s.count}};
  if (s.count == 0) return cast(b, b.splat_i(0, {ElemType::S64, {2, 0}}), t);
  Value pos = b.iota(it, 0);
  if (upper) pos = b.sub(b.splat_i(s.count - 1, it), pos);
  auto [i, j] = tril_coords(b, pos, col, s);
  if (upper) {
    i = b.sub(b.splat_i(row - 1, it), i);
    j = b.sub(b.splat_i(col - 1, it), j);
  }
  Value both = b.concatenate({b.reshape(i, {1, s.count}), b.reshape(j, {1, s.count})}, 0);
  return cast(b, both, t);
}

}  // namespace

void register_factories() {
  // arange.start_out(Scalar start, Scalar end, Scalar step=1, *, Tensor(a!) out)
  // The length comes from the (already sized) out tensor; start and step are
  // runtime values, so a new range of the same length reuses the program.
  add("arange.start_out", [](Ctx& c) -> std::vector<Value> {
    Value out = c.tensor(3);
    ElemType t = out.elem();
    ElemType acc = hlo::is_float(t) ? ElemType::F64 : ElemType::S64;
    Value i = c.b.iota({acc, out.dims()}, 0);
    Value start = bcast(c.b, c.scalar(0, acc), out.dims());
    Value step = bcast(c.b, c.scalar(2, acc), out.dims());
    return {cast(c.b, c.b.add(start, c.b.mul(i, step)), t)};
  });
  // linspace.out(Scalar start, Scalar end, int steps, *, out) and
  // logspace.out(..., float base, *, out); the tensor-endpoint overloads reach
  // these too. Start, end and base are runtime values.
  add("linspace.out", [](Ctx& c) -> std::vector<Value> {
    Value out = c.tensor(3);
    return {cast(c.b, evenly_spaced(c, out), out.elem())};
  });
  add("logspace.out", [](Ctx& c) -> std::vector<Value> {
    Value out = c.tensor(4);
    Value e = c.b.convert(evenly_spaced(c, out), ElemType::F64);
    Value base = bcast(c.b, c.scalar(3, ElemType::F64), out.dims());
    return {cast(c.b, c.b.binary("power", base, e), out.elem())};
  });
  // eye.m_out(n, m, *, out) / eye.out(n, *, out): the out tensor carries the shape.
  auto eye = [](Ctx& c) -> std::vector<Value> {
    Value out = c.tensor(c.num_args() - 1);
    if (out.rank() != 2) return {zeros_like(c.b, out)};
    hlo::TensorType it{ElemType::S64, out.dims()};
    Value diag = c.b.compare(c.b.iota(it, 0), c.b.iota(it, 1), hlo::Cmp::EQ);
    return {cast(c.b, diag, out.elem())};
  };
  add("eye.m_out", eye);
  add("eye.out", eye);
  add("tril_indices", [](Ctx& c) -> std::vector<Value> { return {triangle_indices(c, false)}; });
  add("triu_indices", [](Ctx& c) -> std::vector<Value> { return {triangle_indices(c, true)}; });
  // _efficientzerotensor(size, dtype?, ...): autograd asks for it as a known-zero
  // gradient; a materialised zero of the meta result's dtype serves every use.
  add("_efficientzerotensor", [](Ctx& c) -> std::vector<Value> {
    c10::ScalarType st = c.opt_dtype(1).value_or(c10::typeMetaToScalarType(c10::get_default_dtype()));
    if (!c.out_meta().empty()) st = c.out_dtype(0);
    hlo::TensorType t{to_elem(st), c.ints(0)};
    return {hlo::is_float(t.elem) || hlo::is_complex(t.elem) ? c.b.splat_f(0, t) : c.b.splat_i(0, t)};
  });
}

}  // namespace tpu::lower

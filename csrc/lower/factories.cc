// Factories that reach the device as out= ops (PyTorch's composites allocate
// with empty() and fill through these): arange, eye; and _efficientzerotensor.
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

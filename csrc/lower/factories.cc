// Factories that reach the device as out= ops (PyTorch's composites allocate
// with empty() and fill through these): arange, eye; and _efficientzerotensor.
#include "lower/helpers.h"

namespace tpu::lower {

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

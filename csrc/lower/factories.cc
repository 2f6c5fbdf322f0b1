// Factories that reach the device as out= ops (PyTorch's composites allocate
// with empty() and fill through these): arange, linspace-free for now.
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
}

}  // namespace tpu::lower

// polar(abs, angle) -> abs * (cos(angle) + i sin(angle)): Llama 4 builds its
// complex rotary table with torch.polar. As on the CPU, both inputs are float or
// both double (broadcast together); the result is complex64 or complex128.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

// polar(Tensor abs, Tensor angle) -> Tensor (polar.out maps here)
std::vector<Value> polar(Ctx& c) {
  c10::ScalarType ta = c.dtype(0), tb = c.dtype(1);
  TORCH_CHECK(ta == tb && (ta == c10::kFloat || ta == c10::kDouble),
              "polar: expected both inputs to be Float or Double tensors of the same dtype, got ",
              ta, " and ", tb);
  ElemType t = to_elem(ta);
  auto [r, theta] = align(c.b, c.tensor(0), c.tensor(1), t);
  Value re = c.b.mul(r, c.b.unary("cosine", theta));
  Value im = c.b.mul(r, c.b.unary("sine", theta));
  return {c.b.binary("complex", re, im)};
}

}  // namespace

void register_polar() { add("polar", polar); }

}  // namespace tpu::lower

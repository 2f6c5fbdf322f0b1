// Matrix products: mm, addmm, addmv, bmm, baddbmm, dot.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

Value matmul2d(hlo::Builder& b, Value x, Value y, ElemType t) {
  return b.dot_general(cast(b, x, t), cast(b, y, t), {}, {}, {1}, {0}, t);
}

Value batched(hlo::Builder& b, Value x, Value y, ElemType t) {
  return b.dot_general(cast(b, x, t), cast(b, y, t), {0}, {0}, {2}, {1}, t);
}

// beta * self + alpha * product, with PyTorch's rule that beta == 0 ignores self
// (so NaN in self does not propagate).
Value scaled_sum(Ctx& c, Value self, Value prod, size_t beta_i, size_t alpha_i, ElemType t) {
  Value alpha = bcast(c.b, c.scalar(alpha_i, t), prod.dims());
  Value beta = bcast(c.b, c.scalar(beta_i, t), prod.dims());
  Value s = bcast(c.b, cast(c.b, self, t), prod.dims());
  Value scaled_self = c.b.select(c.b.compare(beta, zeros_like(c.b, beta), hlo::Cmp::EQ),
                                 zeros_like(c.b, s), c.b.mul(beta, s));
  return c.b.add(scaled_self, c.b.mul(alpha, prod));
}

}  // namespace

void register_linalg() {
  add("mm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {matmul2d(c.b, c.tensor(0), c.tensor(1), t)};
  });
  add("bmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {batched(c.b, c.tensor(0), c.tensor(1), t)};
  });
  add("addmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = matmul2d(c.b, c.tensor(1), c.tensor(2), t);
    return {scaled_sum(c, c.tensor(0), p, 3, 4, t)};
  });
  // addmv(self, mat, vec, beta, alpha): mv and matmul with a vector reach it.
  add("addmv", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = c.b.dot_general(cast(c.b, c.tensor(1), t), cast(c.b, c.tensor(2), t), {}, {}, {1}, {0}, t);
    return {scaled_sum(c, c.tensor(0), p, 3, 4, t)};
  });
  add("baddbmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = batched(c.b, c.tensor(1), c.tensor(2), t);
    return {scaled_sum(c, c.tensor(0), p, 3, 4, t)};
  });
  add("dot", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {c.b.dot_general(cast(c.b, c.tensor(0), t), cast(c.b, c.tensor(1), t), {}, {}, {0}, {0}, t)};
  });
}

}  // namespace tpu::lower

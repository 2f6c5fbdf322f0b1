// Matrix products: mm, addmm, addmv, bmm, baddbmm, addbmm, dot, vdot, and the
// batched forms of matmul (aten/no_grad_composites.cc).
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

// Products of x and y in t, accumulated (and returned) in opmath(t).
Value matmul2d(hlo::Builder& b, Value x, Value y, ElemType t) {
  return dot_acc(b, x, y, {}, {}, {1}, {0}, t);
}

Value batched(hlo::Builder& b, Value x, Value y, ElemType t) {
  return dot_acc(b, x, y, {0}, {0}, {2}, {1}, t);
}

// beta * self + alpha * product, with PyTorch's rule that beta == 0 ignores self
// (so NaN in self does not propagate). Computed in t (the opmath type).
Value scaled_sum(Ctx& c, Value self, Value prod, size_t beta_i, size_t alpha_i, ElemType t) {
  Value alpha = bcast(c.b, c.scalar(alpha_i, t), prod.dims());
  Value beta = bcast(c.b, c.scalar(beta_i, t), prod.dims());
  Value s = bcast(c.b, cast(c.b, self, t), prod.dims());
  Value scaled_self = c.b.select(c.b.compare(beta, zeros_like(c.b, beta), hlo::Cmp::EQ),
                                 zeros_like(c.b, s), c.b.mul(beta, s));
  return c.b.add(scaled_self, c.b.mul(alpha, prod));
}

// addbmm in float16/bfloat16 rounds per batch up to this many batches (the
// program grows with each); beyond, one contraction in t.
constexpr int64_t kMaxRoundedBatches = 64;

}  // namespace

void register_linalg() {
  add("mm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {cast(c.b, matmul2d(c.b, c.tensor(0), c.tensor(1), t), t)};
  });
  add("bmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {cast(c.b, batched(c.b, c.tensor(0), c.tensor(1), t), t)};
  });
  // matmul of a batch of matrices [..., n, k] by one of the same batch [..., k, m]
  // or by one matrix [k, m]: one dot_general that reads its operands where they lie.
  // PyTorch's decomposition (expand, reshape, bmm) copies a transposed view such as
  // attention's q, k and v before the product; this form is what aten/no_grad_composites.cc
  // routes here when no gradient is recorded, every other form stays decomposed.
  add("matmul", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    Value x = c.tensor(0), y = c.tensor(1);
    const int64_t n = static_cast<int64_t>(x.dims().size());
    TORCH_CHECK(n >= 3 && (y.dims().size() == 2 || static_cast<int64_t>(y.dims().size()) == n),
                "matmul lowering: expects [..., n, k] by [k, m] or by [..., k, m]");
    if (y.dims().size() == 2) return {cast(c.b, dot_acc(c.b, x, y, {}, {}, {n - 1}, {0}, t), t)};
    std::vector<int64_t> batch(n - 2);
    for (int64_t d = 0; d < n - 2; ++d) batch[d] = d;
    return {cast(c.b, dot_acc(c.b, x, y, batch, batch, {n - 1}, {n - 2}, t), t)};
  });
  add("addmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = matmul2d(c.b, c.tensor(1), c.tensor(2), t);
    return {cast(c.b, scaled_sum(c, c.tensor(0), p, 3, 4, opmath(t)), t)};
  });
  // addmv(self, mat, vec, beta, alpha): mv and matmul with a vector reach it.
  add("addmv", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = dot_acc(c.b, c.tensor(1), c.tensor(2), {}, {}, {1}, {0}, t);
    return {cast(c.b, scaled_sum(c, c.tensor(0), p, 3, 4, opmath(t)), t)};
  });
  add("baddbmm", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value p = batched(c.b, c.tensor(1), c.tensor(2), t);
    return {cast(c.b, scaled_sum(c, c.tensor(0), p, 3, 4, opmath(t)), t)};
  });
  // addbmm(self, batch1 [B, N, M], batch2 [B, M, P], beta, alpha): the batch
  // dimension is contracted together with M, giving the summed product [N, P].
  add("addbmm", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    int64_t batches = c.tensor(1).dims()[0];
    if (opmath(t) == t || batches == 0 || batches > kMaxRoundedBatches) {
      Value p = dot_acc(b, c.tensor(1), c.tensor(2), {}, {}, {0, 2}, {0, 1}, t);
      return {cast(b, scaled_sum(c, c.tensor(0), p, 3, 4, opmath(t)), t)};
    }
    // float16/bfloat16: PyTorch adds one batch's product at a time into the
    // result, rounding it to t after each; doing the same keeps the last bits.
    ElemType f = opmath(t);
    Value p = batched(b, c.tensor(1), c.tensor(2), t);  // [B, N, P] in f
    int64_t n = p.dims()[1], q = p.dims()[2];
    auto product = [&](int64_t i) {
      return b.reshape(b.slice(p, {i, 0, 0}, {i + 1, n, q}, {1, 1, 1}), {n, q});
    };
    Value acc = cast(b, scaled_sum(c, c.tensor(0), product(0), 3, 4, f), t);
    Value alpha = bcast(b, c.scalar(4, f), {n, q});
    for (int64_t i = 1; i < batches; ++i)
      acc = cast(b, b.add(cast(b, acc, f), b.mul(alpha, product(i))), t);
    return {acc};
  });
  // vdot(self, other): dot with self conjugated (the same as dot for real types).
  add("vdot", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    Value x = cast(c.b, c.tensor(0), t);
    if (hlo::is_complex(t)) {
      Value re = c.b.unary("real", x), im = c.b.neg(c.b.unary("imag", x));
      x = c.b.generic("complex", {re, im}, "", x.type);
    }
    return {cast(c.b, dot_acc(c.b, x, c.tensor(1), {}, {}, {0}, {0}, t), t)};
  });
  add("dot", [](Ctx& c) -> std::vector<Value> {
    ElemType t = to_elem(result_type(c, {0, 1}));
    return {cast(c.b, dot_acc(c.b, c.tensor(0), c.tensor(1), {}, {}, {0}, {0}, t), t)};
  });
}

}  // namespace tpu::lower

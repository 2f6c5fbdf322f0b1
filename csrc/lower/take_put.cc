// take / put: indexing a tensor as if it were flat (row-major), with negative
// indices counting from the end. Both check their runtime indices on the
// device (lower/checks.h): XLA would clamp an index out of [-numel, numel) and
// return or overwrite some other element; PyTorch's CPU raises IndexError.
#include "lower/rows.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// `index` flattened to [k] int64 with negatives wrapped, after checking it
// against a flat tensor of `n` elements.
Value flat_index(Ctx& c, Value index, int64_t n) {
  hlo::Builder& b = c.b;
  int64_t k = index.type.numel();
  c.check_index(index, n, true,
                {CheckSpec::kIndexError, "out of range: tried to access index {} on a tensor of " +
                                             std::to_string(n) + " elements."});
  Value i = b.reshape(cast(b, index, ElemType::S64), {k});
  Value neg = b.compare(i, b.splat_i(0, i.type), Cmp::LT);
  return b.select(neg, b.add(i, b.splat_i(n, i.type)), i);
}

void check_long(Ctx& c, size_t arg, const char* op) {
  TORCH_CHECK(c.arg(arg).dtype == c10::ScalarType::Long, op,
              "(): Expected a long tensor for index, but got ", c.arg(arg).dtype);
}

// take(self, index): self.flatten()[index], in index's shape.
std::vector<Value> take(Ctx& c) {
  hlo::Builder& b = c.b;
  check_long(c, 1, "take");
  Value self = c.tensor(0), index = c.tensor(1);
  int64_t n = self.type.numel(), k = index.type.numel();
  hlo::TensorType out{self.elem(), index.dims()};
  if (k == 0) return {hlo::is_float(out.elem) ? b.splat_f(0, out) : b.splat_i(0, out)};
  TORCH_CHECK_INDEX(n > 0, "take(): tried to take from an empty tensor");
  Value i = flat_index(c, index, n);
  Value rows = rows::take(b, b.reshape(self, {n, 1}), i);
  return {b.reshape(rows, index.dims())};
}

// put(self, index, source, accumulate): self with self.flatten()[index] set to
// (or, accumulating, increased by) source's elements in order.
std::vector<Value> put(Ctx& c) {
  hlo::Builder& b = c.b;
  check_long(c, 1, "put");
  Value self = c.tensor(0), index = c.tensor(1), src = c.tensor(2);
  int64_t n = self.type.numel(), k = index.type.numel();
  TORCH_CHECK(src.type.numel() == k, "put_(): Expected source and index to have the same number "
              "of elements, but got source.numel() = ", src.type.numel(), ", index.numel() = ", k);
  if (k == 0) return {self};
  TORCH_CHECK_INDEX(n > 0, "put_(): Tried to put elements into an empty tensor");
  Value i = flat_index(c, index, n);
  Value upd = b.reshape(cast(b, src, self.elem()), {k, 1});
  Value flat = b.reshape(self, {n, 1});
  hlo::Builder::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  hlo::ReduceOp op = self.elem() == ElemType::PRED ? hlo::ReduceOp::Or : hlo::ReduceOp::Add;
  Value r = b.scatter(flat, b.reshape(i, {k, 1}), upd, s, c.bool_arg(3) ? &op : nullptr);
  return {b.reshape(r, self.dims())};
}

}  // namespace

void register_take_put() {
  add("take", take);
  add("put", put);
}

}  // namespace tpu::lower

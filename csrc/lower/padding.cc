// Non-constant padding: reflection_pad{1,2,3}d and replication_pad{1,2,3}d
// with their backwards. (Constant padding is constant_pad_nd, a composite of
// pad/slice PyTorch already decomposes.)
//
// Both are gathers along each padded dim with a static source-index map
// (reflect: -i -> i, replicate: clamp), applied one dim at a time. The
// backward is the adjoint: a scatter-add of the gradient through the same
// map, again one dim at a time, so no index tensor larger than one dim exists.
// PyTorch's padding list runs from the last dim backwards: (left, right) of
// the last dim, then of the one before, ...
#include <c10/util/Exception.h>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

enum class Mode { kReflect, kReplicate };

// Source position in [0, n) of output position j of a dim padded by (lo, hi).
int64_t source(int64_t j, int64_t n, int64_t lo, Mode m) {
  int64_t i = j - lo;
  if (m == Mode::kReplicate) return std::min(std::max<int64_t>(i, 0), n - 1);
  if (n == 1) return 0;
  int64_t period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

std::vector<int64_t> index_map(int64_t n, int64_t lo, int64_t hi, Mode m) {
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < n + lo + hi; ++j) idx.push_back(source(j, n, lo, m));
  return idx;
}

// x gathered along `dim` at the static positions `idx`.
Value take(hlo::Builder& b, Value x, int64_t dim, const std::vector<int64_t>& idx) {
  int64_t k = static_cast<int64_t>(idx.size());
  Value iv = b.dense_i(idx, {ElemType::S64, {k, 1}});
  hlo::Builder::GatherDims d;
  std::vector<int64_t> slice = x.dims();
  slice[dim] = 1;
  // Result: the index dim first, then x's other dims (offset dims 1..rank-1);
  // a transpose puts the index dim back in place.
  d.collapsed_slice_dims = {dim};
  d.start_index_map = {dim};
  d.index_vector_dim = 1;
  std::vector<int64_t> gdims = {k};
  for (int64_t a = 0; a < x.rank(); ++a)
    if (a != dim) gdims.push_back(x.dims()[a]);
  for (int64_t a = 1; a < x.rank(); ++a) d.offset_dims.push_back(a);
  Value g = b.gather(x, iv, d, slice, {x.elem(), gdims});
  std::vector<int64_t> perm;
  for (int64_t a = 1; a <= dim; ++a) perm.push_back(a);
  perm.push_back(0);
  for (int64_t a = dim + 1; a < x.rank(); ++a) perm.push_back(a);
  return b.transpose(g, perm);
}

// Adjoint of take: sums g (with g.dims()[dim] == idx.size()) into `n` slots.
Value put_add(hlo::Builder& b, Value g, int64_t dim, int64_t n, const std::vector<int64_t>& idx) {
  int64_t k = static_cast<int64_t>(idx.size());
  std::vector<int64_t> perm = {dim};
  for (int64_t a = 0; a < g.rank(); ++a)
    if (a != dim) perm.push_back(a);
  Value upd = b.transpose(g, perm);  // [k, rest...]
  std::vector<int64_t> odims = g.dims();
  odims[dim] = n;
  Value acc = b.splat_f(0, {g.elem(), odims});
  hlo::Builder::ScatterDims d;
  for (int64_t a = 1; a < g.rank(); ++a) d.update_window_dims.push_back(a);
  d.inserted_window_dims = {dim};
  d.scatter_dims_to_operand_dims = {dim};
  d.index_vector_dim = 1;
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  return b.scatter(acc, b.dense_i(idx, {ElemType::S64, {k, 1}}), upd, d, &add);
}

// padding[2i], padding[2i+1] pad dim rank-1-i.
void check_pad(const std::vector<int64_t>& pad, int64_t n, const Value& x, Mode m) {
  TORCH_CHECK(static_cast<int64_t>(pad.size()) == 2 * n, "padding must have ", 2 * n, " values");
  for (int64_t i = 0; i < n; ++i) {
    int64_t size = x.dims()[x.rank() - 1 - i];
    if (m == Mode::kReflect) {
      TORCH_CHECK(pad[2 * i] < size && pad[2 * i + 1] < size,
                  "Argument #4: Padding size should be less than the corresponding input dimension");
    } else {
      TORCH_CHECK(size > 0 || (pad[2 * i] == 0 && pad[2 * i + 1] == 0),
                  "padding of an empty dimension");
    }
  }
}

LowerFn forward(int64_t n, Mode m) {
  return [n, m](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    auto pad = c.ints(1);
    check_pad(pad, n, x, m);
    for (int64_t i = 0; i < n; ++i) {
      int64_t dim = x.rank() - 1 - i;
      int64_t lo = pad[2 * i], hi = pad[2 * i + 1];
      if (lo == 0 && hi == 0) continue;
      int64_t size = x.dims()[dim];
      // Negative padding crops: gather the kept range the same way.
      x = take(c.b, x, dim, index_map(size, lo, hi, m));
    }
    return {x};
  };
}

// *_backward(grad_output, self, padding)
LowerFn backward(int64_t n, Mode m) {
  return [n, m](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(1);
    Value g = cast(c.b, c.tensor(0), opmath(self.elem()));
    auto pad = c.ints(2);
    // Undo the dims in reverse order of the forward (outermost first is fine:
    // each step only touches its own dim).
    for (int64_t i = n - 1; i >= 0; --i) {
      int64_t dim = self.rank() - 1 - i;
      int64_t lo = pad[2 * i], hi = pad[2 * i + 1];
      if (lo == 0 && hi == 0) continue;
      int64_t size = self.dims()[dim];
      g = put_add(c.b, g, dim, size, index_map(size, lo, hi, m));
    }
    return {g};
  };
}

}  // namespace

void register_padding() {
  for (int64_t n : {1, 2, 3}) {
    std::string d = std::to_string(n) + "d";
    add("reflection_pad" + d, forward(n, Mode::kReflect));
    add("reflection_pad" + d + "_backward", backward(n, Mode::kReflect));
    add("replication_pad" + d, forward(n, Mode::kReplicate));
    add("replication_pad" + d + "_backward", backward(n, Mode::kReplicate));
  }
}

}  // namespace tpu::lower

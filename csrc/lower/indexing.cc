// Indexing ops: gather, scatter family, index_add, index_copy, index_fill, advanced
// indexing (index / index_put with a list of optional index tensors),
// embedding's backward, masked_fill, flip, roll, triu/tril.
//
// Elementwise gather/scatter along a dim build full coordinates (the index
// value on `dim`, an iota on every other dim) and use one-element windows.
// Advanced indexing moves the indexed dims to the front, gathers/scatters
// whole slices of the rest, and moves the broadcast index dims to where
// PyTorch puts them (in place of the indexed dims when those are adjacent,
// in front otherwise).
#include <limits>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

// [..., R] coordinates into a rank-R tensor: `index` on `dim`, iota elsewhere.
Value coords(hlo::Builder& b, Value index, int64_t dim, int64_t rank) {
  std::vector<int64_t> d = index.dims(), d1 = d;
  d1.push_back(1);
  std::vector<Value> parts;
  for (int64_t k = 0; k < rank; ++k) {
    Value v = k == dim ? cast(b, index, ElemType::S64) : b.iota({ElemType::S64, d}, k);
    parts.push_back(b.reshape(v, d1));
  }
  return parts.size() == 1 ? parts[0] : b.concatenate(parts, static_cast<int64_t>(d.size()));
}

// gather/scatter's index must lie in [0, size of self's dim) (RuntimeError on the CPU).
void check_elems(Ctx& c, Value self, int64_t dim, Value index) {
  int64_t size = self.rank() == 0 ? 1 : self.dims()[dim];
  c.check_index(index, size, false,
                {CheckSpec::kRuntimeError, "index {} is out of bounds for dimension " +
                                               std::to_string(dim) + " with size " + std::to_string(size)});
}

Value gather_elems(hlo::Builder& b, Value self, int64_t dim, Value index) {
  int64_t r = self.rank();
  // An empty index may have more dims than self: nothing to read.
  if (index.type.numel() == 0) {
    hlo::TensorType t{self.elem(), index.dims()};
    return hlo::is_float(t.elem) ? b.splat_f(0, t) : b.splat_i(0, t);
  }
  hlo::Builder::GatherDims g;
  g.collapsed_slice_dims = iota_dims(0, r);
  g.start_index_map = iota_dims(0, r);
  g.index_vector_dim = r;
  return b.gather(self, coords(b, index, dim, r), g, std::vector<int64_t>(r, 1),
                  {self.elem(), index.dims()});
}

// Scatters `src` (index's shape) into self at (index on dim); combine == nullptr replaces.
Value scatter_elems(hlo::Builder& b, Value self, int64_t dim, Value index, Value src,
                    const hlo::ReduceOp* combine) {
  int64_t r = self.rank();
  if (index.type.numel() == 0) return self;
  if (r == 0) {  // a 0-dim self is a one-element dim 0
    Value one = scatter_elems(b, b.reshape(self, {1}), 0, b.reshape(index, {1}), b.reshape(src, {1}), combine);
    return b.reshape(one, {});
  }
  hlo::Builder::ScatterDims s;
  s.inserted_window_dims = iota_dims(0, r);
  s.scatter_dims_to_operand_dims = iota_dims(0, r);
  s.index_vector_dim = r;
  return b.scatter(self, coords(b, index, dim, r), src, s, combine);
}

// src restricted to index's extent (src may be larger in every dim).
Value fit_src(hlo::Builder& b, Value src, Value index) {
  if (src.dims() == index.dims()) return src;
  return b.slice(src, std::vector<int64_t>(src.rank(), 0), index.dims(),
                 std::vector<int64_t>(src.rank(), 1));
}

// scatter_reduce.two(self, dim, index, src, reduce, include_self)
std::vector<Value> scatter_reduce(Ctx& c) {
  hlo::Builder& b = c.b;
  Value self = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  Value index = c.tensor(2);
  Value src = fit_src(b, cast(b, c.tensor(3), self.elem()), index);
  std::string red = c.str_arg(4);
  bool include_self = c.bool_arg(5);
  hlo::ReduceOp op = hlo::ReduceOp::Add;
  Value ident = zeros_like(b, src);
  if (red == "prod") {
    op = hlo::ReduceOp::Mul;
    ident = scalar_like(b, 1, src);
  } else if (red == "amax") {
    op = hlo::ReduceOp::Max;
    ident = b.broadcast_to(extreme_value(b, src.elem(), false), src.dims());
  } else if (red == "amin") {
    op = hlo::ReduceOp::Min;
    ident = b.broadcast_to(extreme_value(b, src.elem(), true), src.dims());
  } else {
    TORCH_CHECK(red == "sum" || red == "mean", "scatter_reduce: unknown reduce '", red, "'");
  }
  check_elems(c, self, dim, index);
  Value base = include_self ? self : scatter_elems(b, self, dim, index, ident, nullptr);
  Value out = scatter_elems(b, base, dim, index, src, &op);
  if (red != "mean") return {out};
  // mean: divide by the number of contributions (self counts once when included).
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  Value cnt0 = scalar_like(b, include_self ? 1 : 0, self);
  Value cnt = scatter_elems(b, cnt0, dim, index, scalar_like(b, 1, src), &add);
  Value zero = zeros_like(b, cnt);
  Value safe = b.select(b.compare(cnt, zero, Cmp::EQ), scalar_like(b, 1, cnt), cnt);
  Value mean = b.div(out, safe);  // integer division truncates, as PyTorch's floor for >= 0
  return {b.select(b.compare(cnt, zero, Cmp::EQ), self, mean)};
}

// ---- advanced indexing ------------------------------------------------------------

struct Adv {
  std::vector<int64_t> positions, others;  // indexed dims, the rest
  Value idx;                               // [B..., k] s64
  std::vector<int64_t> bdims;              // broadcast index shape B
  std::vector<int64_t> perm;               // self -> indexed dims first
  bool adjacent = true;
};

Adv prepare(Ctx& c, Value self, size_t list_arg) {
  hlo::Builder& b = c.b;
  auto list = c.tensors(list_arg);
  const auto& dts = c.arg(list_arg).dtypes;
  Adv a;
  std::vector<Value> ix;
  for (size_t k = 0; k < list.size(); ++k) {
    if (!list[k].valid()) continue;
    TORCH_CHECK(k >= dts.size() || (dts[k] != c10::ScalarType::Bool && dts[k] != c10::ScalarType::Byte),
                "index: boolean mask indices are expanded by PyTorch before reaching the lowering");
    a.positions.push_back(static_cast<int64_t>(k));
    ix.push_back(list[k]);
  }
  for (int64_t d = 0; d < self.rank(); ++d)
    if (std::find(a.positions.begin(), a.positions.end(), d) == a.positions.end()) a.others.push_back(d);
  for (size_t k = 1; k < a.positions.size(); ++k)
    if (a.positions[k] != a.positions[k - 1] + 1) a.adjacent = false;
  for (auto& v : ix) a.bdims = hlo::broadcast_shapes(a.bdims, v.dims());
  std::vector<int64_t> d1 = a.bdims;
  d1.push_back(1);
  std::vector<Value> parts;
  for (size_t k = 0; k < ix.size(); ++k) {
    Value v = cast(b, ix[k], ElemType::S64);
    int64_t n = self.dims()[a.positions[k]];
    c.check_index(v, n, true,
                  {CheckSpec::kIndexError, "index {} is out of bounds for dimension " +
                                               std::to_string(a.positions[k]) + " with size " + std::to_string(n)});
    Value size = b.splat_i(n, v.type);
    v = b.select(b.compare(v, zeros_like(b, v), Cmp::LT), b.add(v, size), v);  // negative indices
    parts.push_back(b.reshape(bcast(b, v, a.bdims), d1));
  }
  if (!parts.empty())
    a.idx = parts.size() == 1 ? parts[0] : b.concatenate(parts, static_cast<int64_t>(a.bdims.size()));
  a.perm = a.positions;
  a.perm.insert(a.perm.end(), a.others.begin(), a.others.end());
  return a;
}

// Permutation from the gather layout [B..., others...] to PyTorch's result layout.
std::vector<int64_t> result_perm(const Adv& a) {
  int64_t nb = static_cast<int64_t>(a.bdims.size()), no = static_cast<int64_t>(a.others.size());
  std::vector<int64_t> p;
  int64_t first = a.adjacent ? a.positions[0] : 0;
  for (int64_t i = 0; i < first; ++i) p.push_back(nb + i);
  for (int64_t i = 0; i < nb; ++i) p.push_back(i);
  for (int64_t i = first; i < no; ++i) p.push_back(nb + i);
  return p;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<int64_t>(i);
  return inv;
}

std::vector<Value> index(Ctx& c) {
  hlo::Builder& b = c.b;
  Value self = c.tensor(0);
  Adv a = prepare(c, self, 1);
  if (a.positions.empty()) return {self};
  int64_t k = static_cast<int64_t>(a.positions.size()), nb = static_cast<int64_t>(a.bdims.size());
  Value xt = b.transpose(self, a.perm);
  hlo::Builder::GatherDims g;
  g.collapsed_slice_dims = iota_dims(0, k);
  g.start_index_map = iota_dims(0, k);
  g.index_vector_dim = nb;
  std::vector<int64_t> slice(k, 1), out = a.bdims;
  for (int64_t d : a.others) {
    slice.push_back(self.dims()[d]);
    out.push_back(self.dims()[d]);
    g.offset_dims.push_back(static_cast<int64_t>(g.offset_dims.size()) + nb);
  }
  bool empty_source = false;  // a gather cannot slice a zero-size dim: nothing to read, the
  for (int64_t d : a.positions) empty_source |= self.dims()[d] == 0;  // index is empty (or checked)
  hlo::TensorType rt{self.elem(), out};
  bool fp = hlo::is_float(rt.elem) || hlo::is_complex(rt.elem);
  Value r = !empty_source ? b.gather(xt, a.idx, g, slice, rt) : fp ? b.splat_f(0, rt) : b.splat_i(0, rt);
  return {b.transpose(r, result_perm(a))};
}

// index_put(self, indices, values, accumulate) and its in-place forms.
Value index_put(Ctx& c, Value self, size_t list_arg, Value values, bool accumulate) {
  hlo::Builder& b = c.b;
  Adv a = prepare(c, self, list_arg);
  values = cast(b, values, self.elem());
  if (a.positions.empty()) return bcast(b, values, self.dims());
  int64_t k = static_cast<int64_t>(a.positions.size()), nb = static_cast<int64_t>(a.bdims.size());
  std::vector<int64_t> glayout = a.bdims;  // gather layout [B..., others...]
  for (int64_t d : a.others) glayout.push_back(self.dims()[d]);
  auto rp = result_perm(a);
  std::vector<int64_t> rlayout;
  for (int64_t p : rp) rlayout.push_back(glayout[p]);
  Value upd = b.transpose(bcast(b, values, rlayout), inverse(rp));
  hlo::Builder::ScatterDims s;
  s.inserted_window_dims = iota_dims(0, k);
  s.scatter_dims_to_operand_dims = iota_dims(0, k);
  s.index_vector_dim = nb;
  s.update_window_dims = iota_dims(nb, nb + static_cast<int64_t>(a.others.size()));
  hlo::ReduceOp op = self.elem() == ElemType::PRED ? hlo::ReduceOp::Or : hlo::ReduceOp::Add;
  Value xt = b.transpose(self, a.perm);
  Value r = b.scatter(xt, a.idx, upd, s, accumulate ? &op : nullptr);
  return b.transpose(r, inverse(a.perm));
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<Value> embedding_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  Value go = c.tensor(0), ind = c.tensor(1);
  ElemType t = opmath(go.elem());
  int64_t v = c.int_arg(2), pad = c.int_arg(3);
  int64_t m = ind.type.numel(), d = go.dims().back();
  // XLA would drop (or clamp) a row outside the table; the CPU kernel drops a
  // positive one silently and crashes on a negative one. embedding's forward
  // raised already unless the indices changed or backward is called directly.
  c.check_index(ind, v, false, {CheckSpec::kIndexError, "index out of range in self"});
  Value idx = b.reshape(cast(b, ind, ElemType::S64), {m});
  Value g = b.reshape(cast(b, go, t), {m, d});
  Value keep = b.splat_i(1, {ElemType::PRED, {m}});
  if (pad >= 0) keep = b.compare(idx, b.splat_i(pad, idx.type), Cmp::NE);
  Value rowscale = b.select(keep, b.splat_f(1, {t, {m}}), b.splat_f(0, {t, {m}}));
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  Value idx2 = b.reshape(idx, {m, 1});
  if (c.bool_arg(4)) {  // scale_grad_by_freq: divide by how often each index occurs
    hlo::Builder::ScatterDims s;
    s.inserted_window_dims = {0};
    s.scatter_dims_to_operand_dims = {0};
    s.index_vector_dim = 1;
    Value counts = b.scatter(b.splat_f(0, {t, {v}}), idx2, b.splat_f(1, {t, {m}}), s, &add);
    Value per = gather_elems(b, counts, 0, idx);
    rowscale = b.div(rowscale, per);
  }
  g = b.mul(g, b.broadcast_in_dim(rowscale, {m, d}, {0}));
  hlo::Builder::ScatterDims s;
  s.update_window_dims = {1};
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  return {b.scatter(b.splat_f(0, {t, {v, d}}), idx2, g, s, &add)};
}

// triu / tril: keep elements with (col - row) >= diag (triu) or <= diag (tril).
LowerFn triangle(bool upper) {
  return [upper](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    int64_t r = x.rank();
    hlo::TensorType it{ElemType::S64, x.dims()};
    Value diff = b.sub(b.iota(it, r - 1), b.iota(it, r - 2));
    Value diag = b.splat_i(c.int_arg(1), it);
    Value keep = b.compare(diff, diag, upper ? Cmp::GE : Cmp::LE);
    return {b.select(keep, x, zeros_like(b, x))};
  };
}

}  // namespace

void register_indexing() {
  // gather(self, dim, index, sparse_grad)
  add("gather", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    int64_t dim = wrap_dim(c.int_arg(1), self.rank());
    check_elems(c, self, dim, c.tensor(2));
    if (self.rank() == 0 && c.tensor(2).type.numel() != 0) return {self};
    return {gather_elems(c.b, self, dim, c.tensor(2))};
  });
  // scatter.src(self, dim, index, src)
  add("scatter.src", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    Value src = fit_src(c.b, cast(c.b, c.tensor(3), self.elem()), c.tensor(2));
    check_elems(c, self, wrap_dim(c.int_arg(1), self.rank()), c.tensor(2));
    return {scatter_elems(c.b, self, wrap_dim(c.int_arg(1), self.rank()), c.tensor(2), src, nullptr)};
  });
  // scatter.value(self, dim, index, value)
  add("scatter.value", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0), index = c.tensor(2);
    Value src = bcast(c.b, c.scalar(3, self.elem()), index.dims());
    check_elems(c, self, wrap_dim(c.int_arg(1), self.rank()), index);
    return {scatter_elems(c.b, self, wrap_dim(c.int_arg(1), self.rank()), index, src, nullptr)};
  });
  // scatter_add(self, dim, index, src)
  add("scatter_add", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    Value src = fit_src(c.b, cast(c.b, c.tensor(3), self.elem()), c.tensor(2));
    hlo::ReduceOp op = self.elem() == ElemType::PRED ? hlo::ReduceOp::Or : hlo::ReduceOp::Add;
    check_elems(c, self, wrap_dim(c.int_arg(1), self.rank()), c.tensor(2));
    return {scatter_elems(c.b, self, wrap_dim(c.int_arg(1), self.rank()), c.tensor(2), src, &op)};
  });
  add("scatter_reduce.two", scatter_reduce);
  // index_add(self, dim, index, source, alpha)
  add("index_add", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value self = c.tensor(0);
    if (self.rank() == 0) return {b.add(self, b.mul(cast(b, c.tensor(3), self.elem()), c.scalar(4, self.elem())))};
    int64_t dim = wrap_dim(c.int_arg(1), self.rank());
    Value src = cast(b, c.tensor(3), self.elem());
    if (self.elem() != ElemType::PRED) src = b.mul(src, bcast(b, c.scalar(4, self.elem()), src.dims()));
    int64_t n = c.tensor(2).type.numel();
    Value idx = b.reshape(cast(b, c.tensor(2), ElemType::S64), {n, 1});
    check_elems(c, self, dim, idx);
    hlo::Builder::ScatterDims s;
    for (int64_t d = 0; d < self.rank(); ++d)
      if (d != dim) s.update_window_dims.push_back(d);
    s.inserted_window_dims = {dim};
    s.scatter_dims_to_operand_dims = {dim};
    s.index_vector_dim = 1;
    hlo::ReduceOp op = self.elem() == ElemType::PRED ? hlo::ReduceOp::Or : hlo::ReduceOp::Add;
    if (src.rank() == 0) src = b.reshape(src, {1});
    return {b.scatter(self, idx, src, s, &op)};
  });
  // index_copy(self, dim, index, source): source's slices along dim replace
  // self's at the listed positions (Transformers' static KV cache writes this
  // way). As on CPU, a position listed twice gets one of its slices.
  add("index_copy", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    TORCH_CHECK(c.arg(2).dtype == c10::ScalarType::Long,
                "index_copy_(): Expected a long tensor for index, but got ", c.arg(2).dtype);
    Value self = c.tensor(0);
    Value src = cast(b, c.tensor(3), self.elem());
    if (self.rank() == 0) return {b.reshape(src, {})};
    int64_t dim = wrap_dim(c.int_arg(1), self.rank());
    int64_t n = c.tensor(2).type.numel();
    if (n == 0) return {self};
    Value idx = b.reshape(cast(b, c.tensor(2), ElemType::S64), {n, 1});
    hlo::Builder::ScatterDims s;
    for (int64_t d = 0; d < self.rank(); ++d)
      if (d != dim) s.update_window_dims.push_back(d);
    s.inserted_window_dims = {dim};
    s.scatter_dims_to_operand_dims = {dim};
    s.index_vector_dim = 1;
    if (src.rank() == 0) src = b.reshape(src, {1});
    return {b.scatter(self, idx, src, s, nullptr)};
  });
  add("index.Tensor", index);
  add("_unsafe_index.Tensor", index);
  // index_put(self, indices, values, accumulate)
  add("index_put", [](Ctx& c) -> std::vector<Value> {
    return {index_put(c, c.tensor(0), 1, c.tensor(2), c.bool_arg(3))};
  });
  add("_unsafe_index_put", [](Ctx& c) -> std::vector<Value> {
    return {index_put(c, c.tensor(0), 1, c.tensor(2), c.bool_arg(3))};
  });
  // _index_put_impl_(self(a!), indices, values, accumulate, unsafe): new self.
  add("_index_put_impl_", [](Ctx& c) -> std::vector<Value> {
    return {index_put(c, c.tensor(0), 1, c.tensor(2), c.bool_arg(3))};
  });
  add("embedding_dense_backward", embedding_backward);
  // masked_fill.Scalar(self, mask, value) / masked_fill.Tensor(self, mask, value)
  add("masked_fill.Scalar", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0), m = c.tensor(1);
    auto dims = hlo::broadcast_shapes(self.dims(), m.dims());
    self = bcast(c.b, self, dims);
    Value mask = bcast(c.b, cast(c.b, m, ElemType::PRED), dims);
    return {c.b.select(mask, bcast(c.b, c.scalar(2, self.elem()), dims), self)};
  });
  scalars_as_self("masked_fill.Scalar");
  add("masked_fill.Tensor", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0), m = c.tensor(1);
    auto dims = hlo::broadcast_shapes(self.dims(), m.dims());
    self = bcast(c.b, self, dims);
    Value mask = bcast(c.b, cast(c.b, m, ElemType::PRED), dims);
    Value v = bcast(c.b, cast(c.b, c.b.reshape(c.tensor(2), {}), self.elem()), dims);
    return {c.b.select(mask, v, self)};
  });
  // index_fill.int_Scalar / .int_Tensor(self, dim, index, value): a mask along
  // dim (true at the listed positions) selects the fill value.
  for (const char* name : {"index_fill.int_Scalar", "index_fill.int_Tensor"}) {
    add(name, [](Ctx& c) -> std::vector<Value> {
      hlo::Builder& b = c.b;
      Value self = c.tensor(0);
      Value v = c.arg(3).kind == Arg::kScalar ? c.scalar(3, self.elem())
                                              : cast(b, b.reshape(c.tensor(3), {}), self.elem());
      if (self.rank() == 0) return {v};
      int64_t dim = wrap_dim(c.int_arg(1), self.rank()), n = self.dims()[dim];
      int64_t m = c.tensor(2).type.numel();
      Value idx = b.reshape(cast(b, c.tensor(2), ElemType::S64), {m});
      idx = b.select(b.compare(idx, zeros_like(b, idx), Cmp::LT), b.add(idx, b.splat_i(n, idx.type)), idx);
      // [n, m] equality, any over m -> [n]
      Value eq = b.compare(b.iota({ElemType::S64, {n, m}}, 0), b.broadcast_in_dim(idx, {n, m}, {1}), Cmp::EQ);
      Value hit = b.reduce(eq, b.constant_i(0, ElemType::PRED), {1}, hlo::ReduceOp::Or);
      Value mask = b.broadcast_in_dim(hit, self.dims(), {dim});
      return {b.select(mask, bcast(b, v, self.dims()), self)};
    });
  }
  scalars_as_self("index_fill.int_Scalar");
  // flip(self, dims): cumprod's backward needs it.
  add("flip", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    if (x.rank() == 0) return {x};
    return {c.b.reverse(x, wrap_dims(c.ints(1), x.rank()))};
  });
  // roll(self, shifts, dims): rotate by slicing and concatenating; no dims
  // means the flattened tensor.
  add("roll", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    auto shifts = c.ints(1), dims = c.ints(2);
    Value y = x;
    if (dims.empty()) {
      y = b.reshape(x, {x.type.numel()});
      dims = {0};
    }
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t d = wrap_dim(dims[k], y.rank()), n = y.dims()[d];
      if (n == 0) continue;
      int64_t s = ((shifts[k] % n) + n) % n;
      if (s == 0) continue;
      std::vector<int64_t> a0(y.rank(), 0), l0 = y.dims(), a1(y.rank(), 0), l1 = y.dims(), st(y.rank(), 1);
      l0[d] = n - s;  // the head moves to the tail
      a1[d] = n - s;
      y = b.concatenate({b.slice(y, a1, l1, st), b.slice(y, a0, l0, st)}, d);
    }
    return {b.reshape(y, x.dims())};
  });
  add("triu", triangle(true));
  add("tril", triangle(false));
}

}  // namespace tpu::lower

// FBGEMM's table-batched embedding bags (TBE), dense variant: what TorchRec's
// sharded EmbeddingBagCollection runs for its tables (compute kernel "dense",
// fbgemm's DenseTableBatchedEmbeddingBagsCodegen).
//
// fbgemm::dense_embedding_codegen_lookup_function(dev_weights, weights_offsets,
//     D_offsets, total_D, max_D, hash_size_cumsum, total_hash_size_bits, indices,
//     offsets, pooling_mode, indice_weights, feature_requires_grad, output_dtype, ...)
// All tables live in one flat dev_weights; feature t's table starts at
// weights_offsets[t], has D_t = D_offsets[t+1] - D_offsets[t] columns and
// as many rows as fit before the next table's weights_offsets. indices/offsets are one
// jagged tensor of T*B bags (feature-major). The result is [B, total_D], feature
// t's pooled bag in columns D_offsets[t]..D_offsets[t+1].
//
// Per-feature widths are data (D_offsets is a tensor), so the lowering works on
// [N, max_D] rows masked to each feature's D_t rather than on per-table shapes.
// Row ids are checked against their table's size (fbgemm's bounds_check_indices
// would otherwise clamp or warn). Its backward, tpu::tbe_dense_backward, scatters
// the output's gradient back into dev_weights' layout; the autograd glue that
// connects the two is in csrc/aten/fbgemm_kernels.cc.
#include "lower/rows.h"
#include "lower/segments.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using hlo::TensorType;
constexpr ElemType S64 = ElemType::S64;

using segments::seg_of;

// 1-D x at idx (any shape, S64, in range) -> idx's shape.
Value take(hlo::Builder& b, Value x, Value idx) {
  std::vector<int64_t> shape = idx.dims();
  int64_t m = 1;
  for (int64_t d : shape) m *= d;
  if (m == 0 || x.dims()[0] == 0) return b.splat_i(0, {x.elem(), shape});
  hlo::Builder::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value r = b.gather(x, b.reshape(idx, {m, 1}), g, {1}, {x.elem(), {m}});
  return b.reshape(r, shape);
}

Value clamp_to(hlo::Builder& b, Value idx, int64_t size) {
  return b.clamp(b.constant_i(0, S64), idx, b.constant_i(std::max<int64_t>(size - 1, 0), S64));
}

Value col(hlo::Builder& b, Value v, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(v, dims, {0});
}

// What forward and backward share: for each index i, its bag, feature, whether it
// lies in a bag, and the flat dev_weights address of each of its max_D columns.
struct Layout {
  int64_t t, bsz, nb, n, max_d, w;
  Value bag, inside, d_of_feature, d_start;  // [N], [N], [T], [T]
  Value addr, col_ok;                        // [N, max_D]
  Value bag_len;                             // [T*B]
};

enum Arg { kWeights = 0, kWeightsOffsets, kDOffsets, kTotalD, kMaxD, kHashSizeCumsum,
           kHashBits, kIndices, kOffsets, kPoolingMode, kIndiceWeights };

Layout layout(Ctx& c, Value weights, size_t wo, size_t dof, size_t hsc, size_t ind, size_t off,
              int64_t max_d, const std::string& op) {
  hlo::Builder& b = c.b;
  Layout L;
  Value dofs = b.convert(c.tensor(dof), S64), woffs = b.convert(c.tensor(wo), S64),
        hs = b.convert(c.tensor(hsc), S64), idx = b.convert(c.tensor(ind), S64),
        offs = b.convert(c.tensor(off), S64);
  TORCH_CHECK(weights.rank() == 1, op, ": dev_weights must be 1-D");
  TORCH_CHECK(dofs.rank() == 1 && dofs.dims()[0] >= 2, op, ": D_offsets must be 1-D [T+1]");
  L.t = dofs.dims()[0] - 1;
  TORCH_CHECK(woffs.rank() == 1 && woffs.dims()[0] == L.t && hs.rank() == 1 &&
                  hs.dims()[0] == L.t + 1,
              op, ": weights_offsets [T] and hash_size_cumsum [T+1] must match D_offsets' T = ", L.t);
  TORCH_CHECK(idx.rank() == 1 && offs.rank() == 1 && offs.dims()[0] >= 1, op,
              ": indices and offsets must be 1-D");
  L.nb = offs.dims()[0] - 1;
  TORCH_CHECK(L.nb % L.t == 0, op, ": offsets has ", L.nb, " bags, not a multiple of the ", L.t,
              " features (variable batch sizes per feature are not supported on tpu)");
  L.bsz = L.nb / L.t;
  L.n = idx.dims()[0];
  L.max_d = max_d;
  L.w = weights.dims()[0];
  TORCH_CHECK(max_d >= 0, op, ": max_D must be non-negative");
  Value starts = b.slice(offs, {0}, {L.nb}, {1}), ends = b.slice(offs, {1}, {L.nb + 1}, {1});
  L.bag_len = b.sub(ends, starts);
  c.check(b.compare(L.bag_len, b.splat_i(0, L.bag_len.type), Cmp::LT), L.bag_len,
          CheckSpec{CheckSpec::kRuntimeError,
                    op + ": a bag has length {}; offsets must be non-decreasing"});
  Value first = b.reshape(b.slice(offs, {0}, {1}, {1}), {});
  Value last = b.reshape(b.slice(offs, {L.nb}, {L.nb + 1}, {1}), {});
  c.check(b.binary("or", b.compare(first, b.constant_i(0, S64), Cmp::LT),
                   b.compare(last, b.constant_i(L.n, S64), Cmp::GT)),
          b.select(b.compare(first, b.constant_i(0, S64), Cmp::LT), first, last),
          CheckSpec{CheckSpec::kIndexError, op + ": offset {} is outside the " +
                                                std::to_string(L.n) + " indices"});
  Value i = b.iota({S64, {L.n}}, 0);
  L.bag = clamp_to(b, seg_of(b, ends, L.n), std::max<int64_t>(L.nb, 1));
  L.inside = b.binary("and", b.compare(i, b.broadcast_to(first, {L.n}), Cmp::GE),
                      b.compare(i, b.broadcast_to(last, {L.n}), Cmp::LT));
  Value feat = b.div(L.bag, b.splat_i(std::max<int64_t>(L.bsz, 1), {S64, {L.n}}));
  L.d_start = b.slice(dofs, {0}, {L.t}, {1});
  L.d_of_feature = b.sub(b.slice(dofs, {1}, {L.t + 1}, {1}), L.d_start);
  // A feature's table ends where the next table starts (features may share a table,
  // so hash_size_cumsum, which is per table, cannot say it): the smallest weights
  // offset above the feature's own, else the end of dev_weights.
  Value wf = b.broadcast_in_dim(woffs, {L.t, L.t}, {0}), wg = b.broadcast_in_dim(woffs, {L.t, L.t}, {1});
  Value table_end = reduce_min(
      b, b.select(b.compare(wg, wf, Cmp::GT), wg, b.splat_i(L.w, {S64, {L.t, L.t}})), {1}, false);
  Value rows_t = b.div(b.sub(table_end, woffs), b.max(L.d_of_feature, b.splat_i(1, {S64, {L.t}})));
  Value d_i = take(b, L.d_of_feature, feat), rows_i = take(b, rows_t, feat),
        woff_i = take(b, woffs, feat);
  Value bad = b.binary("and", L.inside,
                       b.binary("or", b.compare(idx, b.splat_i(0, idx.type), Cmp::LT),
                                b.compare(idx, rows_i, Cmp::GE)));
  c.check(bad, idx, CheckSpec{CheckSpec::kIndexError,
                              op + ": embedding row {} is out of range for its table"});
  std::vector<int64_t> nd = {L.n, max_d};
  Value d = b.iota({S64, nd}, 1);
  L.col_ok = b.binary("and", col(b, L.inside, nd), b.compare(d, col(b, d_i, nd), Cmp::LT));
  L.col_ok = b.binary("and", L.col_ok, col(b, b.unary("not", bad), nd));
  Value base = b.add(woff_i, b.mul(idx, d_i));
  L.addr = b.add(col(b, base, nd), d);
  c.check(b.binary("and", L.col_ok, b.binary("or", b.compare(L.addr, b.splat_i(0, L.addr.type), Cmp::LT),
                                              b.compare(L.addr, b.splat_i(L.w, L.addr.type), Cmp::GE))),
          L.addr, CheckSpec{CheckSpec::kIndexError,
                            op + ": element {} is outside dev_weights (" + std::to_string(L.w) +
                                " elements): weights_offsets or D_offsets do not fit"});
  return L;
}

void check_pooling(int64_t mode, const std::string& op) {
  TORCH_CHECK(mode == 0 || mode == 1, op, ": pooling_mode ", mode,
              " is not supported on tpu (0 = sum and 1 = mean are)");
}

// [T*B, max_D] bag sums -> divided by the bag's length for mean pooling.
Value mean_scale(hlo::Builder& b, const Layout& L, ElemType t) {
  Value len = b.convert(b.max(L.bag_len, b.splat_i(1, L.bag_len.type)), t);
  return col(b, len, {L.nb, L.max_d});
}

// output [B, total_D] column c: feature f(c) = #{t : D_offsets[t+1] <= c}, column
// c - D_offsets[f(c)]; the flat [T*B*max_D] position of (bag f(c)*B + b, that column).
Value output_positions(hlo::Builder& b, const Layout& L, int64_t total_d) {
  Value ends = b.add(L.d_start, L.d_of_feature);
  Value f = clamp_to(b, seg_of(b, ends, total_d), L.t);
  Value within = b.sub(b.iota({S64, {total_d}}, 0), take(b, L.d_start, f));
  std::vector<int64_t> bd = {L.bsz, total_d};
  Value bagpos = b.add(b.mul(b.broadcast_in_dim(f, bd, {1}), b.splat_i(L.bsz, {S64, bd})),
                       b.iota({S64, bd}, 0));
  return b.add(b.mul(bagpos, b.splat_i(L.max_d, {S64, bd})), b.broadcast_in_dim(within, bd, {1}));
}

std::vector<Value> dense_lookup(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::string op = "fbgemm::dense_embedding_codegen_lookup_function";
  Value w = c.tensor(kWeights);
  const int64_t total_d = c.int_arg(kTotalD), max_d = c.int_arg(kMaxD);
  const int64_t mode = c.int_arg(kPoolingMode);
  check_pooling(mode, op);
  TORCH_CHECK(c.int_arg(12) == 0, op, ": output_dtype ", c.int_arg(12),
              " is not supported on tpu (0 = float32 is)");
  TORCH_CHECK(c.num_args() <= 13 || c.is_none(13), op,
              ": variable batch sizes per feature (B_offsets) are not supported on tpu");
  TORCH_CHECK(hlo::is_float(w.elem()), op, ": dev_weights must be floating point");
  Layout L = layout(c, w, kWeightsOffsets, kDOffsets, kHashSizeCumsum, kIndices, kOffsets, max_d, op);
  ElemType acc = ElemType::F32;
  std::vector<int64_t> nd = {L.n, max_d};
  Value vals = b.convert(take(b, w, clamp_to(b, L.addr, L.w)), acc);
  vals = b.select(L.col_ok, vals, b.splat_f(0, {acc, nd}));
  if (auto pw = c.opt_tensor(kIndiceWeights))
    vals = b.mul(vals, col(b, b.convert(*pw, acc), nd));
  Value pooled = b.splat_f(0, {acc, {L.nb + 1, max_d}});
  if (L.n > 0 && max_d > 0) {
    // Rows outside every bag go to the extra row nb, sliced off below.
    Value where = b.select(L.inside, L.bag, b.splat_i(L.nb, L.bag.type));
    pooled = rows::scatter_add(b, pooled, where, vals);
  }
  pooled = b.slice(pooled, {0, 0}, {L.nb, max_d}, {1, 1});
  if (mode == 1) pooled = b.div(pooled, mean_scale(b, L, acc));
  if (L.bsz == 0 || total_d == 0 || max_d == 0) return {b.splat_f(0, {acc, {L.bsz, total_d}})};
  Value pos = clamp_to(b, output_positions(b, L, total_d), L.nb * max_d);
  return {take(b, b.reshape(pooled, {L.nb * max_d}), pos)};
}

// tpu::tbe_dense_backward(Tensor grad_output, Tensor dev_weights, Tensor weights_offsets,
//     Tensor D_offsets, int max_D, Tensor hash_size_cumsum, Tensor indices, Tensor offsets,
//     int pooling_mode, Tensor? indice_weights) -> Tensor  (dev_weights' gradient)
std::vector<Value> dense_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::string op = "tpu::tbe_dense_backward";
  Value g = c.tensor(0), w = c.tensor(1);
  const int64_t max_d = c.int_arg(4), mode = c.int_arg(8);
  check_pooling(mode, op);
  Layout L = layout(c, w, 2, 3, 5, 6, 7, max_d, op);
  const int64_t total_d = g.rank() == 2 ? g.dims()[1] : -1;
  TORCH_CHECK(g.rank() == 2 && g.dims()[0] == L.bsz, op, ": grad_output must be [", L.bsz,
              ", total_D]");
  ElemType acc = ElemType::F32;
  Value zero_w = b.splat_f(0, {w.elem(), {L.w}});
  if (L.n == 0 || max_d == 0 || L.w == 0 || L.bsz == 0) return {zero_w};
  // The pooled gradient per bag and column: grad_output[b, D_offsets[t] + d].
  std::vector<int64_t> bd = {L.nb, max_d};
  Value bag = b.iota({S64, bd}, 0), d = b.iota({S64, bd}, 1);
  Value feat = b.div(bag, b.splat_i(L.bsz, {S64, bd}));
  Value bb = b.binary("remainder", bag, b.splat_i(L.bsz, {S64, bd}));
  Value colpos = b.add(take(b, L.d_start, feat), d);
  Value ok = b.compare(d, take(b, L.d_of_feature, feat), Cmp::LT);
  Value flat = b.add(b.mul(bb, b.splat_i(total_d, {S64, bd})), clamp_to(b, colpos, total_d));
  Value gp = b.convert(take(b, b.reshape(g, {L.bsz * total_d}), clamp_to(b, flat, L.bsz * total_d)), acc);
  gp = b.select(ok, gp, b.splat_f(0, {acc, bd}));
  if (mode == 1) gp = b.div(gp, mean_scale(b, L, acc));
  // Each index's row of gradient, weighted, scattered into dev_weights' layout.
  std::vector<int64_t> nd = {L.n, max_d};
  hlo::Builder::GatherDims gd;
  gd.offset_dims = {1};
  gd.collapsed_slice_dims = {0};
  gd.start_index_map = {0};
  gd.index_vector_dim = 1;
  Value rows = b.gather(gp, b.reshape(L.bag, {L.n, 1}), gd, {1, max_d}, {acc, nd});
  if (!c.is_none(9)) rows = b.mul(rows, col(b, b.convert(c.tensor(9), acc), nd));
  Value addr = b.select(L.col_ok, L.addr, b.splat_i(L.w, L.addr.type));  // L.w: dropped
  hlo::Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  Value out = b.scatter(b.splat_f(0, {acc, {L.w + 1}}), b.reshape(addr, {L.n * max_d, 1}),
                        b.reshape(rows, {L.n * max_d}), s, &add);
  return {b.convert(b.slice(out, {0}, {L.w}, {1}), w.elem())};
}

}  // namespace

void register_tbe() {
  add("fbgemm::dense_embedding_codegen_lookup_function", dense_lookup);
  skip_meta("fbgemm::dense_embedding_codegen_lookup_function");  // fbgemm registers none
  add("tpu::tbe_dense_backward", dense_backward);
}

}  // namespace tpu::lower

// FBGEMM's jagged-tensor ops (namespace fbgemm), the ones TorchRec's
// KeyedJaggedTensor / EmbeddingBagCollection path calls: offsets from lengths,
// permuting features, jagged <-> padded dense, segment sums.
//
// A jagged tensor is a flat `values` [N, ...] plus lengths (or offsets, their
// exclusive prefix sum) that cut it into consecutive segments. Every lowering
// below maps each output position to its segment with seg_of() (a scatter of
// the segment ends and a prefix sum: no data-dependent shape, no search) and
// then gathers. Output sizes are static arguments (permuted_lengths_sum,
// max_lengths, total_L) or the input's; the ops whose size would be data
// (permute_*_sparse_data without permuted_lengths_sum) get it from a sync in
// csrc/aten/fbgemm_kernels.cc first. Lengths, offsets and the positions they
// address are checked on the device: bad input raises, never reads a clamped
// element.
//
// fbgemm's library is loaded after torch_tpu; the kernels for these names are
// registered before their schemas exist (csrc/aten/registration.cc).
#include "lower/rows.h"
#include "lower/segments.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using hlo::TensorType;
constexpr ElemType S64 = ElemType::S64;

bool is_integer(ElemType t) { return !hlo::is_float(t) && t != ElemType::PRED && !hlo::is_complex(t); }

using segments::prefix_sum;
using segments::seg_of;

// x [N, rest...] at rows idx (S64 [M], in range) -> [M, rest...].
Value rows_at(hlo::Builder& b, Value x, Value idx) {
  int64_t m = idx.dims()[0], r = x.rank();
  std::vector<int64_t> out = x.dims(), slice = x.dims();
  out[0] = m;
  slice[0] = 1;
  if (m == 0) return b.splat_i(0, {x.elem(), out});
  if (x.dims()[0] == 0) return hlo::is_float(x.elem()) ? b.splat_f(0, {x.elem(), out})
                                                     : b.splat_i(0, {x.elem(), out});
  hlo::Builder::GatherDims g;
  for (int64_t d = 1; d < r; ++d) g.offset_dims.push_back(d);
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  return b.gather(x, b.reshape(idx, {m, 1}), g, slice, {x.elem(), out});
}

// Clamps `idx` into [0, size) for a gather whose out-of-range entries are masked
// or already reported by a check.
Value clamp_index(hlo::Builder& b, Value idx, int64_t size) {
  return b.clamp(b.constant_i(0, S64), idx, b.constant_i(std::max<int64_t>(size - 1, 0), S64));
}

Value zero_of(hlo::Builder& b, const TensorType& t) {
  return hlo::is_float(t.elem) ? b.splat_f(0, t) : b.splat_i(0, t);
}

// x broadcast over `dims` along axis 0 (a per-row value applied to every column).
Value per_row(hlo::Builder& b, Value v, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(v, dims, {0});
}

void check_offsets_nondecreasing(Ctx& c, Value lengths, const std::string& op) {
  c.check(c.b.compare(lengths, c.b.splat_i(0, lengths.type), Cmp::LT), lengths,
          CheckSpec{CheckSpec::kRuntimeError,
                    op + ": a segment has length {}; lengths must be non-negative and "
                         "offsets non-decreasing"});
}

// asynchronous_{complete,exclusive,inclusive}_cumsum(Tensor t_in) -> Tensor:
// prefix sums along the last axis; complete has one more element (a leading 0),
// exclusive starts at 0 and drops the total, inclusive is cumsum.
LowerFn cumsum_kind(int kind) {  // 0 complete, 1 exclusive, 2 inclusive
  return [kind](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = c.tensor(0);
    TORCH_CHECK(x.rank() == 1 || x.rank() == 2,
                "fbgemm cumsum ops take a 1-D or 2-D tensor, got ", x.rank(), "-D");
    TORCH_CHECK(is_integer(x.elem()) || hlo::is_float(x.elem()),
                "fbgemm cumsum ops take an integer or floating tensor, got ", c.dtype(0));
    Value cs = prefix_sum(b, x);
    if (kind == 2) return {cs};
    int64_t r = x.rank();
    std::vector<int64_t> low(r, 0), high(r, 0), interior(r, 0);
    low[r - 1] = 1;
    Value full = b.pad(cs, hlo::is_float(x.elem()) ? b.constant_f(0, x.elem())
                                                   : b.constant_i(0, x.elem()),
                       low, high, interior);
    if (kind == 0) return {full};
    std::vector<int64_t> start(r, 0), limit = x.dims(), step(r, 1);
    return {b.slice(full, start, limit, step)};
  };
}

// permute_{2D,1D}_sparse_data(Tensor permute, Tensor lengths, Tensor values,
//     Tensor? weights=None, SymInt? permuted_lengths_sum=None) -> (Tensor, Tensor, Tensor?)
// lengths [T, B] (2D) or [T] (1D, one segment per entry): segment group t' of the
// result is group permute[t'] of the input, with its values (and weights).
LowerFn permute_sparse(bool two_d) {
  return [two_d](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    const std::string op = two_d ? "fbgemm::permute_2D_sparse_data" : "fbgemm::permute_1D_sparse_data";
    Value perm = c.tensor(0), lengths = c.tensor(1), values = c.tensor(2);
    std::optional<Value> weights = c.opt_tensor(3);
    std::optional<int64_t> total = c.opt_int(4);
    TORCH_CHECK(total.has_value(), op, ": internal error: permuted_lengths_sum must be known "
                "before lowering (csrc/aten/fbgemm_kernels.cc supplies it)");
    TORCH_CHECK(perm.rank() == 1 && is_integer(perm.elem()), op,
                ": permute must be a 1-D integer tensor");
    TORCH_CHECK(is_integer(lengths.elem()) && lengths.rank() == (two_d ? 2 : 1), op,
                ": lengths must be a ", two_d ? 2 : 1, "-D integer tensor, got ",
                lengths.rank(), "-D ", c.dtype(1));
    TORCH_CHECK(values.rank() >= 1, op, ": values must have at least one dimension");
    TORCH_CHECK(*total >= 0, op, ": permuted_lengths_sum must be non-negative, got ", *total);
    const int64_t t = lengths.dims()[0], bsz = two_d ? lengths.dims()[1] : 1;
    const int64_t tp = perm.dims()[0], k = tp * bsz, n = values.dims()[0], l = *total;
    Value p = b.convert(perm, S64);
    c.check_index(p, t, false,
                  CheckSpec{CheckSpec::kIndexError,
                            op + ": permute index {} is out of range for " + std::to_string(t) +
                                " features"});
    p = clamp_index(b, p, t);
    Value len = b.reshape(b.convert(lengths, S64), {t, bsz});
    check_offsets_nondecreasing(c, len, op);
    Value in_starts = b.sub(prefix_sum(b, b.reshape(len, {t * bsz})), b.reshape(len, {t * bsz}));
    in_starts = b.reshape(in_starts, {t, bsz});
    Value out_len = b.reshape(rows_at(b, len, p), {k});
    Value src_start = b.reshape(rows_at(b, in_starts, p), {k});
    Value permuted_lengths =
        b.reshape(rows_at(b, b.reshape(lengths, {t, bsz}), p), two_d ? std::vector<int64_t>{tp, bsz}
                                                                      : std::vector<int64_t>{tp});
    Value out_ends = prefix_sum(b, out_len);
    Value sum = k == 0 ? b.constant_i(0, S64) : b.reshape(b.slice(out_ends, {k - 1}, {k}, {1}), {});
    c.check(b.compare(sum, b.constant_i(l, S64), Cmp::NE), sum,
            CheckSpec{CheckSpec::kRuntimeError,
                      op + ": the permuted lengths sum to {}, but permuted_lengths_sum is " +
                          std::to_string(l)});
    std::vector<int64_t> vout = values.dims();
    vout[0] = l;
    if (l == 0) {
      Value empty_v = zero_of(b, {values.elem(), vout});
      Value empty_w = weights ? zero_of(b, {weights->elem(), [&] {
                                  auto d = weights->dims();
                                  d[0] = 0;
                                  return d;
                                }()})
                              : permuted_lengths;
      return {permuted_lengths, empty_v, empty_w};
    }
    Value seg = clamp_index(b, seg_of(b, out_ends, l), std::max<int64_t>(k, 1));
    Value out_starts = b.sub(out_ends, out_len);
    Value pos = b.add(b.sub(b.iota({S64, {l}}, 0), rows_at(b, out_starts, seg)),
                      rows_at(b, src_start, seg));
    c.check_index(pos, n, false,
                  CheckSpec{CheckSpec::kIndexError,
                            op + ": lengths address value {}, but values has " +
                                std::to_string(n) + " elements"});
    pos = clamp_index(b, pos, n);
    Value out_v = rows_at(b, values, pos);
    Value out_w = permuted_lengths;  // not computed when weights is None (meta gives None)
    if (weights) {
      TORCH_CHECK(weights->rank() >= 1 && weights->dims()[0] == n, op,
                  ": weights must have one row per value (", n, "), got ",
                  c10::IntArrayRef(weights->dims()));
      out_w = rows_at(b, *weights, pos);
    }
    return {permuted_lengths, out_v, out_w};
  };
}

// The segment of each position of a jagged dimension given by offsets [B+1]:
// (row b, position within the row, whether the position lies inside a row).
struct JaggedPos {
  Value row, within, inside;
};

JaggedPos jagged_positions(Ctx& c, Value offsets, int64_t total, const std::string& op) {
  hlo::Builder& b = c.b;
  TORCH_CHECK(offsets.rank() == 1 && offsets.dims()[0] >= 1 && is_integer(offsets.elem()), op,
              ": offsets must be a 1-D integer tensor of B+1 elements");
  int64_t bsz = offsets.dims()[0] - 1;
  Value off = b.convert(offsets, S64);
  Value starts = b.slice(off, {0}, {bsz}, {1}), ends = b.slice(off, {1}, {bsz + 1}, {1});
  check_offsets_nondecreasing(c, b.sub(ends, starts), op);
  Value first = b.reshape(b.slice(off, {0}, {1}, {1}), {});
  Value last = b.reshape(b.slice(off, {bsz}, {bsz + 1}, {1}), {});
  c.check(b.binary("or", b.compare(first, b.constant_i(0, S64), Cmp::LT),
                   b.compare(last, b.constant_i(total, S64), Cmp::GT)),
          b.select(b.compare(first, b.constant_i(0, S64), Cmp::LT), first, last),
          CheckSpec{CheckSpec::kIndexError,
                    op + ": offset {} is outside the " + std::to_string(total) +
                        " values of the jagged tensor"});
  Value j = b.iota({S64, {total}}, 0);
  Value row = clamp_index(b, seg_of(b, ends, total), std::max<int64_t>(bsz, 1));
  Value within = b.sub(j, rows_at(b, starts, row));
  Value inside = b.binary("and", b.compare(j, b.broadcast_to(first, {total}), Cmp::GE),
                          b.compare(j, b.broadcast_to(last, {total}), Cmp::LT));
  return {row, within, inside};
}

// jagged_to_padded_dense_forward(Tensor values, Tensor[] offsets, SymInt[] max_lengths,
//     float padding_value=0.) -> Tensor: values [N, D] with one jagged dimension ->
// [B, max_length, D]; rows longer than max_length are cut, shorter ones padded.
std::vector<Value> jagged_to_padded_dense(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::string op = "fbgemm::jagged_to_padded_dense";
  Value values = c.tensor(0);
  std::vector<Value> offs = c.tensors(1);
  std::vector<int64_t> maxl = c.ints(2);
  TORCH_CHECK(offs.size() == 1 && maxl.size() == 1, op,
              ": the tpu lowering takes one jagged dimension, got ", offs.size());
  TORCH_CHECK(values.rank() == 2, op, ": values must be 2-D [N, D], got ", values.rank(), "-D");
  Value off = b.convert(offs[0], S64);
  TORCH_CHECK(off.rank() == 1 && off.dims()[0] >= 1, op, ": offsets must be 1-D [B+1]");
  const int64_t bsz = off.dims()[0] - 1, ml = maxl[0], n = values.dims()[0], d = values.dims()[1];
  Value starts = b.slice(off, {0}, {bsz}, {1}), ends = b.slice(off, {1}, {bsz + 1}, {1});
  Value len = b.sub(ends, starts);
  check_offsets_nondecreasing(c, len, op);
  Value l = b.iota({S64, {bsz, ml}}, 1);
  Value valid = b.compare(l, per_row(b, len, {bsz, ml}), Cmp::LT);
  Value idx = b.add(per_row(b, starts, {bsz, ml}), l);
  Value checked = b.select(valid, idx, b.splat_i(0, idx.type));
  c.check(b.binary("and", valid, b.binary("or", b.compare(idx, b.splat_i(0, idx.type), Cmp::LT),
                                         b.compare(idx, b.splat_i(n, idx.type), Cmp::GE))),
          checked,
          CheckSpec{CheckSpec::kIndexError, op + ": offsets address value {}, but values has " +
                                                std::to_string(n) + " rows"});
  Value pad = c.scalar(3, values.elem());
  if (n == 0 || bsz == 0 || ml == 0) return {b.broadcast_to(pad, {bsz, ml, d})};
  Value rows = rows_at(b, values, b.reshape(clamp_index(b, idx, n), {bsz * ml}));
  rows = b.reshape(rows, {bsz, ml, d});
  Value v3 = b.broadcast_in_dim(valid, {bsz, ml, d}, {0, 1});
  return {b.select(v3, rows, b.broadcast_to(pad, {bsz, ml, d}))};
}

// padded [B, L, D] -> jagged [total_L, D]: row j of the result is padded[b, j - offsets[b]]
// for the row b holding j, zero where j - offsets[b] >= L or j is in no row. Serves
// jagged_to_padded_dense_backward(grad_output, offsets, total_L) and
// dense_to_jagged_forward(dense, x_offsets, total_L).
std::vector<Value> padded_to_jagged(Ctx& c, const std::string& op) {
  hlo::Builder& b = c.b;
  Value dense = c.tensor(0);
  std::vector<Value> offs = c.tensors(1);
  std::optional<int64_t> total = c.opt_int(2);
  TORCH_CHECK(total.has_value(), op, ": the tpu lowering needs total_L");
  TORCH_CHECK(offs.size() == 1 && dense.rank() == 3, op,
              ": the tpu lowering takes one jagged dimension (dense [B, L, D]), got ",
              offs.size(), " offsets and a ", dense.rank(), "-D dense");
  const int64_t bsz = dense.dims()[0], ml = dense.dims()[1], d = dense.dims()[2], n = *total;
  TORCH_CHECK(offs[0].rank() == 1 && offs[0].dims()[0] == bsz + 1, op, ": offsets must have ",
              bsz + 1, " elements for a batch of ", bsz);
  JaggedPos jp = jagged_positions(c, offs[0], n, op);
  if (n == 0) return {zero_of(b, {dense.elem(), {0, d}})};
  Value keep = b.binary("and", jp.inside, b.compare(jp.within, b.splat_i(ml, jp.within.type), Cmp::LT));
  if (bsz == 0 || ml == 0) return {zero_of(b, {dense.elem(), {n, d}})};
  Value flat_idx = b.add(b.mul(jp.row, b.splat_i(ml, jp.row.type)), clamp_index(b, jp.within, ml));
  Value rows = rows_at(b, b.reshape(dense, {bsz * ml, d}), clamp_index(b, flat_idx, bsz * ml));
  return {b.select(b.broadcast_in_dim(keep, {n, d}, {0}), rows, zero_of(b, {dense.elem(), {n, d}}))};
}

// segment_sum_csr(SymInt batch_size, Tensor csr_seg, Tensor values) -> Tensor:
// out[s] = sum of values[csr_seg[s] * batch_size : csr_seg[s+1] * batch_size].
std::vector<Value> segment_sum_csr(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::string op = "fbgemm::segment_sum_csr";
  const int64_t bs = c.int_arg(0);
  Value seg = c.tensor(1), values = c.tensor(2);
  TORCH_CHECK(values.rank() == 1, op, ": values must be 1-D");
  TORCH_CHECK(seg.rank() == 1 && seg.dims()[0] >= 1, op, ": csr_seg must be 1-D [S+1]");
  const int64_t s = seg.dims()[0] - 1, n = values.dims()[0];
  Value off = b.mul(b.convert(seg, S64), b.splat_i(bs, {S64, {s + 1}}));
  JaggedPos jp = jagged_positions(c, off, n, op);
  Value zero = zero_of(b, {values.elem(), {s}});
  if (n == 0 || s == 0) return {zero};
  // Positions in no segment go to the extra slot s, which is cut off.
  Value where = b.reshape(b.select(jp.inside, jp.row, b.splat_i(s, jp.row.type)), {n, 1});
  hlo::Builder::ScatterDims sd;
  sd.inserted_window_dims = {0};
  sd.scatter_dims_to_operand_dims = {0};
  sd.index_vector_dim = 1;
  hlo::ReduceOp add = hlo::ReduceOp::Add;
  ElemType acc = opmath(values.elem());
  Value sums = b.scatter(zero_of(b, {acc, {s + 1}}), where, b.convert(values, acc), sd, &add);
  return {b.convert(b.slice(sums, {0}, {s}, {1}), values.elem())};
}

}  // namespace

// block_bucketize_sparse_features(Tensor lengths, Tensor indices, bool bucketize_pos,
//     bool sequence, Tensor block_sizes, SymInt my_size, Tensor? weights=None, ...)
//     -> (new_lengths, new_indices, new_weights?, new_pos?, unbucketize_permute?)
// TorchRec's row-wise sharding: splits each bag (feature t, sample b; lengths [T*B])
// by the rank that owns each id's row block. An id below block_sizes[t] * my_size
// goes to bucket id / block_size as id % block_size; a larger one to bucket
// id % my_size as id / my_size (fbgemm's rule). The result is ordered by (bucket, t, b),
// ids keeping their order within a bag. Every output has the input's size, so the
// lowering computes each id's destination (its (bucket, t, b) segment's start plus
// the ids before it in the same bag and bucket) and scatters.
std::vector<Value> block_bucketize(Ctx& c) {
  hlo::Builder& b = c.b;
  const std::string op = "fbgemm::block_bucketize_sparse_features";
  Value lengths = c.tensor(0), indices = c.tensor(1), sizes = c.tensor(4);
  const bool sequence = c.bool_arg(3);
  const int64_t m = c.int_arg(5);
  std::optional<Value> weights = c.opt_tensor(6);
  TORCH_CHECK(!c.bool_arg(2), op, " on tpu: bucketize_pos is not supported");
  for (size_t i : {7, 9, 11, 12})
    TORCH_CHECK(i >= c.num_args() || c.is_none(i), op, " on tpu: argument ",
                c.schema().arguments()[i].name(), " is not supported (variable batch sizes, "
                "explicit bucket positions or block counts)");
  const bool keep = c.num_args() > 10 && c.bool_arg(10);
  TORCH_CHECK(lengths.rank() == 1 && indices.rank() == 1 && sizes.rank() == 1 &&
                  is_integer(lengths.elem()) && is_integer(indices.elem()) && is_integer(sizes.elem()),
              op, ": lengths, indices and block_sizes must be 1-D integer tensors");
  TORCH_CHECK(m >= 1, op, ": my_size must be positive, got ", m);
  const int64_t k = lengths.dims()[0], t = sizes.dims()[0], n = indices.dims()[0];
  TORCH_CHECK(t > 0 ? k % t == 0 : k == 0, op, ": lengths has ", k, " bags, not a multiple of ",
              "the ", t, " features in block_sizes");
  const int64_t bsz = t > 0 ? k / t : 0;
  Value len = b.convert(lengths, S64);
  check_offsets_nondecreasing(c, len, op);
  Value ends = prefix_sum(b, len);
  Value total = k == 0 ? b.constant_i(0, S64) : b.reshape(b.slice(ends, {k - 1}, {k}, {1}), {});
  c.check(b.compare(total, b.constant_i(n, S64), Cmp::NE), total,
          CheckSpec{CheckSpec::kRuntimeError,
                    op + ": the lengths add up to {}, but there are " + std::to_string(n) +
                        " indices"});
  Value new_lengths_shape = zero_of(b, {lengths.elem(), {m * k}});
  if (n == 0 || k == 0) {
    Value nl = new_lengths_shape, ni = zero_of(b, {indices.elem(), {n}});
    Value nw = weights ? zero_of(b, weights->type) : nl;
    return {nl, ni, nw, nl, sequence ? ni : nl};
  }
  Value idx = b.convert(indices, S64);
  c.check(b.compare(idx, b.splat_i(0, idx.type), Cmp::LT), idx,
          CheckSpec{CheckSpec::kIndexError, op + ": index {} is negative"});
  Value bag = clamp_index(b, seg_of(b, ends, n), k);
  Value feat = b.div(bag, b.splat_i(bsz, {S64, {n}}));
  Value blk = rows_at(b, b.convert(sizes, S64), feat);
  Value one = b.splat_i(1, {S64, {n}}), my = b.splat_i(m, {S64, {n}});
  Value blk1 = b.max(blk, one);
  Value small = b.compare(idx, b.mul(blk, my), Cmp::LT);
  Value bucket = b.select(small, b.div(idx, blk1), b.binary("remainder", idx, my));
  Value local = keep ? idx : b.select(small, b.binary("remainder", idx, blk1), b.div(idx, my));
  Value key = b.add(b.mul(bucket, b.splat_i(k, {S64, {n}})), bag);  // (bucket, t, b)
  // Ids per (bucket, bag) segment, and where each segment starts in the result.
  Value counts = b.reshape(rows::scatter_add(b, b.splat_i(0, {S64, {m * k, 1}}), key,
                                             b.splat_i(1, {S64, {n, 1}})), {m * k});
  Value seg_start = b.sub(prefix_sum(b, counts), counts);
  // Ids before each one in its bag and bucket: per bucket, a running count over all
  // ids (exclusive) at the id minus the same at its bag's start.
  Value onehot = b.convert(b.compare(b.broadcast_in_dim(bucket, {m, n}, {1}),
                                     b.iota({S64, {m, n}}, 0), Cmp::EQ), S64);
  Value before = b.pad(prefix_sum(b, onehot), b.constant_i(0, S64), {0, 1}, {0, 0}, {0, 0});
  before = b.reshape(before, {m * (n + 1)});  // [bucket, position 0..n]
  Value row = b.mul(bucket, b.splat_i(n + 1, {S64, {n}}));
  Value bag_start = rows_at(b, b.sub(ends, len), bag);
  Value rank = b.sub(rows_at(b, before, b.add(row, b.iota({S64, {n}}, 0))),
                     rows_at(b, before, b.add(row, bag_start)));
  Value dest = b.add(rows_at(b, seg_start, key), rank);
  auto place = [&](Value v) {  // v [n] scattered to dest (a permutation)
    Value out = rows::scatter_add(b, zero_of(b, {v.elem(), {n, 1}}), dest, b.reshape(v, {n, 1}));
    return b.reshape(out, {n});
  };
  Value new_lengths = b.convert(counts, lengths.elem());
  Value new_indices = place(b.convert(local, indices.elem()));
  Value new_weights = new_lengths;  // not computed when weights is None (meta gives None)
  if (weights) {
    TORCH_CHECK(weights->rank() == 1 && weights->dims()[0] == n, op,
                ": weights must have one value per index (", n, ")");
    new_weights = place(*weights);
  }
  Value permute = sequence ? b.convert(dest, indices.elem()) : new_lengths;
  return {new_lengths, new_indices, new_weights, new_lengths, permute};
}

void register_jagged() {
  add("fbgemm::asynchronous_complete_cumsum", cumsum_kind(0));
  add("fbgemm::asynchronous_exclusive_cumsum", cumsum_kind(1));
  add("fbgemm::asynchronous_inclusive_cumsum", cumsum_kind(2));
  add("fbgemm::permute_2D_sparse_data", permute_sparse(true));
  add("fbgemm::permute_1D_sparse_data", permute_sparse(false));
  add("fbgemm::jagged_to_padded_dense_forward", jagged_to_padded_dense);
  add("fbgemm::jagged_to_padded_dense_backward",
      [](Ctx& c) { return padded_to_jagged(c, "fbgemm::jagged_to_padded_dense_backward"); });
  add("fbgemm::dense_to_jagged_forward",
      [](Ctx& c) { return padded_to_jagged(c, "fbgemm::dense_to_jagged_forward"); });
  add("fbgemm::segment_sum_csr", segment_sum_csr);
  add("fbgemm::block_bucketize_sparse_features", block_bucketize);
}

}  // namespace tpu::lower

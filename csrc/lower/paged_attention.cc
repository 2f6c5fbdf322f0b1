// Paged attention for serving (vLLM's attention backend on tpu): the KV cache of
// every request lives in fixed-size blocks of one cache tensor, and a block table
// says which blocks hold request r's context. Both ops are defined in
// csrc/aten/tpu_ops.cc (namespace `tpu`) and lowered here once, for every mode.
//
//   kv_cache       [2, num_blocks, block_size, kv_heads, head_size]  (0: keys, 1: values)
//   block_tables   int [R, max_blocks]
//   seq_lens       int [R]     context length of request r, its new tokens included
//   query_start_loc int [R+1]  where request r's query tokens start in the batch
//
// Token t of request r sits at position seq_lens[r] - q_len[r] + (t - query_start_loc[r])
// and attends causally to its request's positions. Tokens at or past
// query_start_loc[R] are padding (bucketed batch sizes) and give zeros.
//
// The attention loops over KV blocks with an online softmax (a stablehlo.while
// whose trip count is the longest context in the batch, a runtime value): memory
// stays O(tokens x block) whatever the context length, and one program serves
// every mix of prefill and decode of a bucket's sizes.
#include <limits>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

// vec[idx] for a 1-D vector and an index vector (indices already in range).
Value take(hlo::Builder& b, Value vec, Value idx) {
  hlo::Builder::GatherDims g;
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  const int64_t n = idx.dims()[0];
  Value i2 = b.reshape(idx, {n, 1});
  return b.gather(vec, i2, g, {1}, hlo::TensorType{vec.elem(), {n}});
}

// Rows rows[idx] of a [N, ...] tensor for an index vector [T]: [T, ...].
Value take_rows(hlo::Builder& b, Value rows, Value idx) {
  hlo::Builder::GatherDims g;
  const int64_t r = rows.rank();
  for (int64_t d = 1; d < r; ++d) g.offset_dims.push_back(d);
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  const int64_t n = idx.dims()[0];
  std::vector<int64_t> slice = rows.dims();
  slice[0] = 1;
  std::vector<int64_t> out = rows.dims();
  out[0] = n;
  return b.gather(rows, b.reshape(idx, {n, 1}), g, slice, hlo::TensorType{rows.elem(), out});
}

void check_cache(const Ctx& c, size_t cache_arg) {
  const std::vector<int64_t> d = c.tensor(cache_arg).dims();
  TORCH_CHECK(d.size() == 5 && d[0] == 2, c.schema().name(),
              ": kv_cache must be [2, num_blocks, block_size, kv_heads, head_size], got ",
              c10::IntArrayRef(d));
}

bool is_int(c10::ScalarType t) { return t == c10::kInt || t == c10::kLong; }

// write_kv_cache(Tensor kv_cache, Tensor key, Tensor value, Tensor slot_mapping) -> Tensor
// Scatters each token's key and value into its slot (block * block_size + offset);
// slot -1 marks a padding token and writes nothing.
std::vector<Value> write_kv_cache(Ctx& c) {
  hlo::Builder& b = c.b;
  check_cache(c, 0);
  Value cache = c.tensor(0), key = c.tensor(1), value = c.tensor(2), slots = c.tensor(3);
  const auto& cd = cache.dims();
  const int64_t nslots = cd[1] * cd[2];
  TORCH_CHECK(key.dims() == value.dims() && key.rank() == 3 && key.dims()[1] == cd[3] &&
                  key.dims()[2] == cd[4],
              "tpu::write_kv_cache: key and value must be [tokens, kv_heads, head_size] = [T, ",
              cd[3], ", ", cd[4], "], got ", c10::IntArrayRef(key.dims()), " and ",
              c10::IntArrayRef(value.dims()));
  TORCH_CHECK(c.dtype(1) == c.dtype(0) && c.dtype(2) == c.dtype(0),
              "tpu::write_kv_cache: key and value must have the cache's dtype ", c.dtype(0),
              ", got ", c.dtype(1), " and ", c.dtype(2));
  TORCH_CHECK(is_int(c.dtype(3)) && slots.rank() == 1 && slots.dims()[0] == key.dims()[0],
              "tpu::write_kv_cache: slot_mapping must be an integer vector of one slot per token (",
              key.dims()[0], "), got ", c.dtype(3), " ", c10::IntArrayRef(slots.dims()));
  const int64_t t = key.dims()[0];
  Value s = b.convert(slots, ElemType::S64);
  // -1 is padding; anything else outside [0, slots) would be clamped by XLA.
  Value bad = b.binary("or", b.compare(s, b.splat_i(-1, s.type), Cmp::LT),
                       b.compare(s, b.splat_i(nslots, s.type), Cmp::GE));
  c.check(bad, s, CheckSpec{CheckSpec::kIndexError,
                            "tpu::write_kv_cache: slot {} is out of range for a cache of " +
                                std::to_string(nslots) + " slots (-1 marks padding)"});
  // Padding goes past the end, where scatter drops the update.
  Value pad = b.compare(s, b.splat_i(0, s.type), Cmp::LT);
  s = b.select(pad, b.splat_i(nslots, s.type), s);
  // One scatter of 2T rows at (half, slot) index pairs: the cache keeps its layout
  // (a scatter along its second dimension made XLA transpose the whole cache).
  Value flat = b.reshape(cache, {2, nslots, cd[3], cd[4]});
  Value rows = b.concatenate({key, value}, 0);  // [2T, kv_heads, head_size]
  Value half = b.concatenate({b.splat_i(0, {ElemType::S64, {t, 1}}),
                              b.splat_i(1, {ElemType::S64, {t, 1}})}, 0);
  Value where = b.concatenate({half, b.reshape(b.concatenate({s, s}, 0), {2 * t, 1})}, 1);
  hlo::Builder::ScatterDims sd;
  sd.update_window_dims = {1, 2};
  sd.inserted_window_dims = {0, 1};
  sd.scatter_dims_to_operand_dims = {0, 1};
  sd.index_vector_dim = 1;
  Value out = b.scatter(flat, where, rows, sd, nullptr);
  return {b.reshape(out, cd)};
}

// paged_attention(Tensor query, Tensor kv_cache, Tensor block_tables, Tensor seq_lens,
//                 Tensor query_start_loc, float scale, int sliding_window=-1,
//                 float soft_cap=0.0) -> Tensor
std::vector<Value> paged_attention(Ctx& c) {
  hlo::Builder& b = c.b;
  check_cache(c, 1);
  Value q = c.tensor(0), cache = c.tensor(1), tables = c.tensor(2), lens = c.tensor(3),
        starts = c.tensor(4);
  const auto& cd = cache.dims();
  const int64_t nblocks = cd[1], bs = cd[2], hkv = cd[3], d = cd[4];
  TORCH_CHECK(q.rank() == 3 && q.dims()[2] == d && q.dims()[1] % hkv == 0,
              "tpu::paged_attention: query must be [tokens, heads, ", d,
              "] with heads a multiple of the cache's ", hkv, " kv heads, got ",
              c10::IntArrayRef(q.dims()));
  TORCH_CHECK(c.dtype(0) == c.dtype(1), "tpu::paged_attention: query (", c.dtype(0),
              ") and kv_cache (", c.dtype(1), ") must have one dtype");
  TORCH_CHECK(is_int(c.dtype(2)) && is_int(c.dtype(3)) && is_int(c.dtype(4)) &&
                  tables.rank() == 2 && lens.rank() == 1 && starts.rank() == 1 &&
                  lens.dims()[0] == tables.dims()[0] && starts.dims()[0] == lens.dims()[0] + 1,
              "tpu::paged_attention: block_tables [R, max_blocks], seq_lens [R] and "
              "query_start_loc [R+1] must be integer tensors, got ",
              c10::IntArrayRef(tables.dims()), ", ", c10::IntArrayRef(lens.dims()), ", ",
              c10::IntArrayRef(starts.dims()));
  const int64_t t = q.dims()[0], hq = q.dims()[1], g = hq / hkv;
  const int64_t r = lens.dims()[0], maxb = tables.dims()[1];
  const int64_t window = c.int_arg(6);
  const double soft_cap = c.double_arg(7);
  const ElemType dt = q.elem(), f = opmath(dt), i32 = ElemType::S32;

  Value tab = b.convert(tables, i32), len = b.convert(lens, i32), qsl = b.convert(starts, i32);
  c.check_index(tab, nblocks, false,
                CheckSpec{CheckSpec::kIndexError, "tpu::paged_attention: block {} is out of "
                                                  "range for a cache of " +
                                                      std::to_string(nblocks) + " blocks"});
  Value q_len = b.sub(b.slice(qsl, {1}, {r + 1}, {1}), b.slice(qsl, {0}, {r}, {1}));
  {
    Value l64 = b.convert(len, ElemType::S64);
    Value over = b.binary("or", b.compare(l64, b.splat_i(0, l64.type), Cmp::LT),
                          b.compare(l64, b.splat_i(maxb * bs, l64.type), Cmp::GT));
    c.check(over, l64, CheckSpec{CheckSpec::kIndexError,
                                 "tpu::paged_attention: seq_len {} does not fit the block "
                                 "table's " + std::to_string(maxb * bs) + " positions"});
    Value ql64 = b.convert(q_len, ElemType::S64);
    Value wrong = b.binary("or", b.compare(ql64, b.splat_i(0, ql64.type), Cmp::LT),
                           b.compare(ql64, l64, Cmp::GT));
    c.check(wrong, ql64, CheckSpec{CheckSpec::kRuntimeError,
                                   "tpu::paged_attention: a request has {} query tokens, more "
                                   "than its seq_len or fewer than 0 (query_start_loc must "
                                   "be non-decreasing)"});
  }

  // Each token's request: how many requests end at or before it.
  Value tok = b.iota(hlo::TensorType{i32, {t}}, 0);
  Value ends = b.slice(qsl, {1}, {r + 1}, {1});
  Value ended = b.compare(b.broadcast_in_dim(ends, {t, r}, {1}),
                          b.broadcast_in_dim(tok, {t, r}, {0}), Cmp::LE);
  Value req = reduce_sum(b, b.convert(ended, i32), {1}, false);
  Value valid = b.compare(tok, b.broadcast_to(b.slice(qsl, {r}, {r + 1}, {1}), {t}), Cmp::LT);
  req = b.min(req, b.splat_i(r - 1, req.type));
  Value pos = b.add(b.sub(take(b, len, req), take(b, q_len, req)),
                    b.sub(tok, take(b, qsl, req)));
  pos = b.select(valid, pos, b.splat_i(-1, pos.type));  // padding sees nothing
  Value tok_tables = take_rows(b, tab, req);             // [T, max_blocks]
  // Blocks to visit: enough for the furthest position any token reaches.
  Value furthest = b.reduce(pos, b.constant_i(-1, i32), {0}, hlo::ReduceOp::Max);
  Value trips = b.div(b.add(furthest, b.constant_i(bs, i32)), b.constant_i(bs, i32));

  Value qf = b.mul(b.reshape(cast(b, q, f), {t, hkv, g, d}),
                   b.broadcast_to(cast(b, c.scalar(5, f), f), {t, hkv, g, d}));
  // Keys are rows [0, nblocks) and values rows [nblocks, 2 nblocks) of one reshape of the
  // cache (a bitcast): slicing out keys and values copied the whole cache per call.
  Value kv_rows = b.reshape(cache, {2 * nblocks, bs, hkv, d});
  Value m0 = b.splat_f(-std::numeric_limits<double>::infinity(), {f, {t, hkv, g}});
  Value l0 = b.splat_f(0, {f, {t, hkv, g}});
  Value acc0 = b.splat_f(0, {f, {t, hkv, g, d}});

  // Loop-carried: i, trips, m, l, acc, q, cache rows, token tables, positions.
  auto cond = [](hlo::Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{r.compare(a[0], a[1], Cmp::LT)};
  };
  auto body = [=](hlo::Builder& r, const std::vector<Value>& a) {
    Value i = a[0], m = a[2], l = a[3], acc = a[4], qv = a[5], rows = a[6], tt = a[7],
          ps = a[8];
    Value blk = r.reshape(r.dynamic_slice(tt, {r.constant_i(0, i32), i}, {t, 1}), {t});
    Value kb = take_rows(r, rows, blk);  // [T, bs, hkv, d]
    Value vb = take_rows(r, rows, r.add(blk, r.splat_i(nblocks, blk.type)));
    Value s = dot_acc(r, qv, cast(r, kb, f), {0, 1}, {0, 2}, {3}, {3}, f);  // [T, hkv, g, bs]
    if (soft_cap > 0) {
      Value cap = r.splat_f(soft_cap, s.type);
      s = r.mul(cap, r.unary("tanh", r.div(s, cap)));
    }
    Value kv_pos = r.add(r.iota(hlo::TensorType{i32, {bs}}, 0),
                         r.broadcast_to(r.mul(i, r.constant_i(bs, i32)), {bs}));
    Value kp = r.broadcast_in_dim(kv_pos, {t, bs}, {1});
    Value tp = r.broadcast_in_dim(ps, {t, bs}, {0});
    Value seen = r.compare(kp, tp, Cmp::LE);
    if (window > 0)
      seen = r.binary("and", seen,
                      r.compare(kp, r.sub(tp, r.splat_i(window, tp.type)), Cmp::GT));
    Value mask = r.broadcast_in_dim(seen, {t, hkv, g, bs}, {0, 3});
    Value ninf = r.splat_f(-std::numeric_limits<double>::infinity(), s.type);
    s = r.select(mask, s, ninf);
    Value m_new = r.max(m, reduce_max(r, s, {3}, false));
    // A row that has seen nothing yet keeps max -inf: shift by 0 there, not by -inf.
    Value finite = r.compare(m_new, r.splat_f(-std::numeric_limits<double>::infinity(), m.type),
                             Cmp::NE);
    Value shift = r.select(finite, m_new, r.splat_f(0, m.type));
    Value p = r.unary("exponential", r.sub(s, r.broadcast_in_dim(shift, s.dims(), {0, 1, 2})));
    Value alpha = r.unary("exponential", r.sub(m, shift));
    Value l_new = r.add(r.mul(l, alpha), reduce_sum(r, p, {3}, false));
    Value pv = dot_acc(r, p, cast(r, vb, f), {0, 1}, {0, 2}, {3}, {1}, f);  // [T, hkv, g, d]
    Value acc_new = r.add(r.mul(acc, r.broadcast_in_dim(alpha, acc.dims(), {0, 1, 2})), pv);
    return std::vector<Value>{r.add(i, r.constant_i(1, i32)), a[1], m_new, l_new, acc_new,
                              qv, rows, tt, ps};
  };
  auto out = b.while_loop({b.constant_i(0, i32), trips, m0, l0, acc0, qf, kv_rows, tok_tables, pos},
                          cond, body);
  Value l = out[3], acc = out[4];
  Value empty = b.compare(l, b.splat_f(0, l.type), Cmp::EQ);  // padding tokens
  Value denom = b.select(empty, b.splat_f(1, l.type), l);
  Value o = b.div(acc, b.broadcast_in_dim(denom, acc.dims(), {0, 1, 2}));
  return {cast(b, b.reshape(o, {t, hq, d}), dt)};
}

}  // namespace

void register_paged_attention() {
  add("tpu::write_kv_cache", write_kv_cache);
  // A bad slot is dropped by the scatter (and raised); the others are written, so the
  // cache is updated in place rather than copied per step.
  update_in_place("tpu::write_kv_cache");
  add("tpu::paged_attention", paged_attention, /*static_args=*/{7});
}

}  // namespace tpu::lower

#include "lower/helpers.h"

#include <cmath>

#include <c10/util/Exception.h>

#include <limits>

namespace tpu::lower {

ElemType opmath(ElemType t) {
  return (t == ElemType::F16 || t == ElemType::BF16 || hlo::is_float8(t)) ? ElemType::F32 : t;
}

Value dot_acc(hlo::Builder& b, Value x, Value y, const std::vector<int64_t>& lhs_batch,
              const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
              const std::vector<int64_t>& rhs_contract, ElemType t) {
  return b.dot_general(cast(b, x, t), cast(b, y, t), lhs_batch, rhs_batch, lhs_contract,
                       rhs_contract, opmath(t));
}

namespace {
int category(c10::ScalarType t) {
  if (t == c10::ScalarType::Bool) return 0;
  if (c10::isIntegralType(t, false)) return 1;
  if (c10::isFloatingType(t)) return 2;
  return 3;  // complex
}

c10::ScalarType promote(c10::ScalarType a, c10::ScalarType b) {
  if (a == c10::ScalarType::Undefined) return b;
  if (b == c10::ScalarType::Undefined) return a;
  return c10::promoteTypes(a, b);
}
}  // namespace

c10::ScalarType result_type(const Ctx& c, const std::vector<size_t>& args) {
  // Three priority levels as in c10 ResultTypeState: dimensioned tensors,
  // zero-dim tensors, wrapped numbers / Scalars.
  c10::ScalarType dim = c10::ScalarType::Undefined, zero = dim, wrapped = dim;
  for (size_t i : args) {
    const Arg& a = c.arg(i);
    if (a.kind == Arg::kTensor) {
      if (a.wrapped_number) {
        c10::ScalarType t = a.dtype;
        // Wrapped numbers participate as the default type of their category.
        if (c10::isFloatingType(t)) t = c10::typeMetaToScalarType(c10::get_default_dtype());
        else if (c10::isComplexType(t)) t = c10::typeMetaToScalarType(c10::get_default_complex_dtype());
        wrapped = promote(wrapped, t);
      } else if (a.tensor.rank() == 0) {
        zero = promote(zero, a.dtype);
      } else {
        dim = promote(dim, a.dtype);
      }
    } else if (a.kind == Arg::kScalar) {
      c10::ScalarType t = to_scalar_type(a.scalar.elem());
      if (t == c10::ScalarType::Double) t = c10::typeMetaToScalarType(c10::get_default_dtype());
      else if (t == c10::ScalarType::ComplexDouble)
        t = c10::typeMetaToScalarType(c10::get_default_complex_dtype());
      wrapped = promote(wrapped, t);
    }
  }
  auto combine = [](c10::ScalarType higher, c10::ScalarType lower) {
    if (higher == c10::ScalarType::Undefined) return lower;
    if (lower == c10::ScalarType::Undefined) return higher;
    if (category(lower) > category(higher)) {
      // A lower-priority operand of a higher category lifts the result to it.
      if (category(lower) == 3 && category(higher) == 2) return c10::toComplexType(higher);
      return promote(higher, lower);
    }
    return higher;
  };
  return combine(combine(dim, zero), wrapped);
}

Value cast(hlo::Builder& b, Value v, ElemType t) {
  if (v.elem() == t) return v;
  // PyTorch converts to and from float8 through float32 (c10's Float8 types
  // hold only a float constructor and a float conversion): a double rounds to
  // float first, an integer converts to float first.
  if (hlo::is_float8(t)) return float8_from_f32(b, cast(b, v, ElemType::F32), t);
  if (hlo::is_float8(v.elem())) return cast(b, b.convert(v, ElemType::F32), t);
  if (hlo::is_complex(v.elem()) && !hlo::is_complex(t)) v = b.unary("real", v);
  if (t == ElemType::PRED && !hlo::is_complex(v.elem())) {
    return b.compare(v, zeros_like(b, v), hlo::Cmp::NE);
  }
  return b.convert(v, t);
}

Value bcast(hlo::Builder& b, Value v, const std::vector<int64_t>& dims) {
  if (v.dims() == dims) return v;
  return b.broadcast_to(v, dims);
}

std::pair<Value, Value> align(hlo::Builder& b, Value x, Value y, ElemType t) {
  auto dims = hlo::broadcast_shapes(x.dims(), y.dims());
  return {bcast(b, cast(b, x, t), dims), bcast(b, cast(b, y, t), dims)};
}

Value zeros_like(hlo::Builder& b, Value v) {
  return hlo::is_float(v.elem()) || hlo::is_complex(v.elem()) ? b.splat_f(0, v.type)
                                                                : b.splat_i(0, v.type);
}

Value scalar_like(hlo::Builder& b, double f, Value v) {
  return hlo::is_float(v.elem()) || hlo::is_complex(v.elem())
             ? b.splat_f(f, v.type)
             : b.splat_i(static_cast<int64_t>(f), v.type);
}

int64_t wrap_dim(int64_t d, int64_t rank) {
  int64_t r = rank == 0 ? 1 : rank;
  TORCH_CHECK_INDEX(d >= -r && d < r, "Dimension out of range (expected to be in range of [",
                    -r, ", ", r - 1, "], but got ", d, ")");
  return d < 0 ? d + r : d;
}

std::vector<int64_t> wrap_dims(const std::vector<int64_t>& d, int64_t rank) {
  std::vector<int64_t> out;
  for (int64_t x : d) out.push_back(wrap_dim(x, rank));
  return out;
}

namespace {
Value reduce_impl(hlo::Builder& b, Value v, const std::vector<int64_t>& dims_in, bool keepdim,
                  hlo::ReduceOp op, Value init) {
  std::vector<int64_t> dims = dims_in;
  if (v.rank() == 0) return v;
  Value r = b.reduce(v, init, dims, op);
  if (!keepdim) return r;
  std::vector<int64_t> kd = v.dims();
  for (int64_t d : dims) kd[d] = 1;
  return b.reshape(r, kd);
}

}  // namespace

Value extreme_value(hlo::Builder& b, ElemType t, bool high) {
  if (hlo::is_float8(t) && hlo::float8_format(t).fnuz) {
    // No infinities (and -inf would round to their NaN): the largest finite value.
    const hlo::Float8Format f = hlo::float8_format(t);
    const int mant = f.max_code & ((1 << f.mant_bits) - 1), exp = f.max_code >> f.mant_bits;
    const double mx = std::ldexp(1.0 + std::ldexp(mant, -f.mant_bits), exp - f.bias);
    return b.constant_f(high ? mx : -mx, t);
  }
  if (hlo::is_float(t))
    return b.constant_f((high ? 1 : -1) * std::numeric_limits<double>::infinity(), t);
  if (t == ElemType::PRED) return b.constant_i(high ? 1 : 0, t);
  int bits = hlo::bit_width(t);
  if (hlo::is_unsigned_int(t))
    return b.constant_i(high ? (bits == 64 ? -1 : (int64_t(1) << bits) - 1) : 0, t);
  int64_t mx = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
  return b.constant_i(high ? mx : -mx - 1, t);
}

Value reduce_sum(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_impl(b, v, dims, keepdim, hlo::ReduceOp::Add,
                     hlo::is_float(v.elem()) || hlo::is_complex(v.elem()) ? b.constant_f(0, v.elem())
                                                                          : b.constant_i(0, v.elem()));
}
Value reduce_max(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_impl(b, v, dims, keepdim, hlo::ReduceOp::Max, extreme_value(b, v.elem(), false));
}
Value reduce_min(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_impl(b, v, dims, keepdim, hlo::ReduceOp::Min, extreme_value(b, v.elem(), true));
}

Value reduce_extreme_nan(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim,
                         bool max) {
  if (!hlo::is_float(v.elem())) return max ? reduce_max(b, v, dims, keepdim) : reduce_min(b, v, dims, keepdim);
  if (v.rank() == 0) return v;
  // stablehlo.maximum/minimum on XLA:CPU return the non-NaN operand; PyTorch's
  // amax/amin/max/min propagate NaN. A NaN accumulator wins, then a NaN element.
  auto body = [max](hlo::Builder& rb, const std::vector<Value>& a) -> std::vector<Value> {
    Value acc = a[0], x = a[1];
    Value m = max ? rb.max(acc, x) : rb.min(acc, x);
    Value pick_x = rb.compare(x, x, hlo::Cmp::NE);
    return {rb.select(rb.compare(acc, acc, hlo::Cmp::NE), acc, rb.select(pick_x, x, m))};
  };
  Value r = b.reduce({v}, {extreme_value(b, v.elem(), !max)}, dims, body)[0];
  if (!keepdim) return r;
  std::vector<int64_t> kd = v.dims();
  for (int64_t d : dims) kd[d] = 1;
  return b.reshape(r, kd);
}

// Stable sort of (x, iota) along dim; NaN sorts as the largest value.
std::pair<Value, Value> sort_with_index(hlo::Builder& b, Value x, int64_t dim, bool descending) {
  Value iota = b.iota({ElemType::S64, x.dims()}, dim);
  bool fl = hlo::is_float(x.elem());
  auto r = b.sort({x, iota}, dim, true,
                  [descending, fl](hlo::Builder& b, const std::vector<Value>& a) -> std::vector<Value> {
                    Value p = a[0], q = a[1];
                    Value lt = b.compare(p, q, descending ? hlo::Cmp::GT : hlo::Cmp::LT);
                    if (!fl) return {lt};
                    Value pn = b.compare(p, p, hlo::Cmp::NE), qn = b.compare(q, q, hlo::Cmp::NE);
                    // descending: NaN first; ascending: NaN last.
                    Value nan_order = descending ? b.binary("and", pn, b.unary("not", qn))
                                                 : b.binary("and", b.unary("not", pn), qn);
                    return {b.binary("or", lt, nan_order)};
                  });
  return {r[0], r[1]};
}

// Declared here rather than in helpers.h (nothing else calls them, and every lowering
// file includes helpers.h): bucketize.cc, weight_norm.cc, upsample_linear1d.cc,
// upsample_bicubic2d.cc, polar.cc.
void register_bucketize();
void register_weight_norm();
void register_upsample_linear1d();
void register_upsample_bicubic2d();
void register_polar();
void register_paged_attention();  // paged_attention.cc (serving, namespace tpu)
void register_jagged();           // jagged.cc (fbgemm's jagged ops, TorchRec)
void register_tbe();              // tbe.cc (fbgemm's table-batched embeddings, TorchRec)

void register_all() {
  static bool done = false;
  if (done) return;
  done = true;
  register_elementwise();
  register_reductions();
  register_linalg();
  register_nn();
  register_shape_ops();
  register_factories();
  register_random();
  register_foreach();
  register_norm();
  register_activations();
  register_conv();
  register_pooling();
  register_indexing();
  register_selection();
  register_dropout();
  register_resize();
  register_losses();
  register_statistics();
  register_histogram();
  register_take_put();
  register_optim();
  register_padding();
  register_embedding_bag();
  register_math();
  register_cumulative();
  register_misc_math();
  register_distributions();
  register_order_stats();
  register_distance();
  register_grid_sample();
  register_adaptive_pool();
  register_fold();
  register_fft();
  register_grad_scaler();
  register_rnn_cells();
  register_scaled_mm();
  register_bucketize();
  register_weight_norm();
  register_upsample_linear1d();
  register_upsample_bicubic2d();
  register_polar();
  register_paged_attention();
  register_jagged();
  register_tbe();
}

}  // namespace tpu::lower

// Ops with regions: reduce, reduce_window, select_and_scatter, sort, scatter, while.
#include <algorithm>

#include "hlo/builder_impl.h"

namespace tpu::hlo {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Add: return "add";
    case ReduceOp::Mul: return "multiply";
    case ReduceOp::Max: return "maximum";
    case ReduceOp::Min: return "minimum";
    case ReduceOp::And: return "and";
    case ReduceOp::Or: return "or";
    case ReduceOp::Xor: return "xor";
  }
  return "";
}

// Checks up front, naming the outer op, rather than letting the body fail with
// the name of the inner binary op.
void check_reduce_op(const std::string& op, ReduceOp r, ElemType t) {
  const bool bitwise = r == ReduceOp::And || r == ReduceOp::Or || r == ReduceOp::Xor;
  if (bitwise && (is_float(t) || is_complex(t)))
    fail(op, std::string(reduce_op_name(r)) + " needs integer or i1 elements, got " + mlir_name(t));
  if ((r == ReduceOp::Max || r == ReduceOp::Min) && is_complex(t))
    fail(op, std::string(reduce_op_name(r)) + " is not defined for complex elements");
}

RegionFn binary_body(ReduceOp r) {
  return [r](Builder& b, const std::vector<Value>& a) -> std::vector<Value> {
    return {b.binary(reduce_op_name(r), a[0], a[1])};
  };
}

namespace {

std::vector<int64_t> ones_or(const std::string& op, const std::vector<int64_t>& v, size_t n,
                             const char* what) {
  if (v.empty()) return std::vector<int64_t>(n, 1);  // empty = default of all ones
  if (v.size() != n) fail(op, std::string(what) + " needs " + std::to_string(n) + " entries");
  for (int64_t x : v)
    if (x < 1) fail(op, std::string(what) + " entries must be >= 1, got " + dims_str(v));
  return v;
}

std::vector<std::pair<int64_t, int64_t>> pads_or(
    const std::string& op, const std::vector<std::pair<int64_t, int64_t>>& p, size_t n) {
  if (p.empty()) return std::vector<std::pair<int64_t, int64_t>>(n, {0, 0});
  if (p.size() != n) fail(op, "padding needs " + std::to_string(n) + " pairs");
  return p;
}

bool any_padding(const std::vector<std::pair<int64_t, int64_t>>& p) {
  for (const auto& x : p)
    if (x.first != 0 || x.second != 0) return true;
  return false;
}

}  // namespace

namespace {

// XLA's CPU compiler splits a reduction over any dimension longer than 32 into a
// reduce_window over blocks of 32 and a reduce of the blocks (TreeReductionRewriter,
// for the accuracy of long sums): two kernels, each generated and compiled on its
// own, about 10 ms of a cold program's compile each. Where the order cannot change
// the answer (max/min/and/or, integer sums) we split each such dimension ourselves
// into factors of at most 32 (a row-major reshape, free) and reduce them all at
// once, which the rewriter leaves alone: one kernel (the GPT training step's
// softmaxes and index checks: 6 kernels fewer). Float sums keep XLA's
// blocks: the one-kernel sum of a column of 1024 measured 8x less accurate, and
// XLA folds the reshape of a computed operand back before the rewriter anyway.
// split_long_reduced_dims returns false (nothing to split, or a dimension with a
// prime factor above 32) to leave the reduction as written.
constexpr int64_t kCpuReduceWindow = 32;

bool one_kernel_ok(ReduceOp op, ElemType t, bool full) {
  if (op == ReduceOp::Max || op == ReduceOp::Min || op == ReduceOp::And || op == ReduceOp::Or)
    return true;
  // A full reduction becomes a variadic one whose two results are combined
  // (Builder::reduce): right for the ops above, twice the answer for a sum.
  return op == ReduceOp::Add && !full && !is_float(t) && !is_complex(t);
}

bool split_long_reduced_dims(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& dims,
                             std::vector<int64_t>& new_shape, std::vector<int64_t>& new_dims) {
  bool any_long = false;
  for (int64_t d = 0; d < static_cast<int64_t>(in_dims.size()); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    int64_t n = in_dims[d];
    if (!reduced || n <= kCpuReduceWindow) {
      if (reduced) new_dims.push_back(static_cast<int64_t>(new_shape.size()));
      new_shape.push_back(n);
      continue;
    }
    any_long = true;
    while (n > kCpuReduceWindow) {  // peel off the largest factor of at most 32
      int64_t f = kCpuReduceWindow;
      while (f > 1 && n % f != 0) --f;
      if (f == 1) return false;
      new_dims.push_back(static_cast<int64_t>(new_shape.size()));
      new_shape.push_back(f);
      n /= f;
    }
    new_dims.push_back(static_cast<int64_t>(new_shape.size()));
    new_shape.push_back(n);
  }
  return any_long;
}

}  // namespace

Value Builder::reduce(Value input, Value init, const std::vector<int64_t>& dims, ReduceOp op) {
  check_reduce_op("reduce", op, input.elem());
  check_dim_list("reduce", dims, input.rank(), "dimensions");
  const bool full = dims.size() == static_cast<size_t>(input.rank());
  std::vector<int64_t> shape, split_dims;
  if (one_kernel_ok(op, input.elem(), full) && split_long_reduced_dims(input.dims(), dims, shape, split_dims)) {
    Value split = reshape(input, shape);
    if (!full)
      return reduce(std::vector<Value>{split}, std::vector<Value>{init}, split_dims, binary_body(op))[0];
    // To a scalar, XLA's simplifier folds the reshape away again (a full reduction
    // of a reshape is one of its operand); a variadic reduction, which the rewriter
    // leaves alone, keeps it one kernel. The second input is the first again, and
    // both results are used (an unused one is dropped before the rewriter runs).
    auto body = [op](Builder& b, const std::vector<Value>& a) -> std::vector<Value> {
      return {b.binary(reduce_op_name(op), a[0], a[2]), b.binary(reduce_op_name(op), a[1], a[3])};
    };
    auto r = reduce(std::vector<Value>{split, split}, std::vector<Value>{init, init}, split_dims, body);
    return binary(reduce_op_name(op), r[0], r[1]);
  }
  return reduce(std::vector<Value>{input}, std::vector<Value>{init}, dims, binary_body(op))[0];
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits,
                                   const std::vector<int64_t>& dims, const RegionFn& body) {
  const std::string op = "reduce";
  if (inputs.empty() || inputs.size() != inits.size())
    fail(op, "needs as many init values as inputs (at least one)");
  check_dim_list(op, dims, inputs[0].rank(), "dimensions");
  std::vector<TensorType> scalars, results;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dims() != inputs[0].dims())
      fail(op, "inputs differ in shape: " + inputs[i].type.str() + " vs " + inputs[0].type.str());
    if (inits[i].type != scalar_of(inputs[i].elem()))
      fail(op, "init " + inits[i].type.str() + " must be rank-0 " + mlir_name(inputs[i].elem()));
    scalars.push_back(scalar_of(inputs[i].elem()));
    TensorType rt{inputs[i].elem(), {}};
    for (int64_t d = 0; d < inputs[i].rank(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) rt.dims.push_back(inputs[i].dims()[d]);
    results.push_back(rt);
  }
  std::vector<TensorType> args = scalars;  // accumulators, then elements
  args.insert(args.end(), scalars.begin(), scalars.end());
  std::string reg = impl_->region(*this, op, args, body, scalars);
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return impl_->emit(op, operands, {reg}, "dimensions = " + i64_array(dims), results);
}

Value Builder::reduce_window(Value input, Value init, const std::vector<int64_t>& window_dims,
                             const std::vector<int64_t>& window_strides,
                             const std::vector<int64_t>& base_dilations,
                             const std::vector<int64_t>& window_dilations,
                             const std::vector<std::pair<int64_t, int64_t>>& padding,
                             ReduceOp rop) {
  const std::string op = "reduce_window";
  const size_t r = static_cast<size_t>(input.rank());
  check_reduce_op(op, rop, input.elem());
  if (init.type != scalar_of(input.elem()))
    fail(op, "init " + init.type.str() + " must be rank-0 " + mlir_name(input.elem()));
  if (window_dims.size() != r) fail(op, "window_dimensions needs " + std::to_string(r) + " entries");
  for (int64_t w : window_dims)
    if (w < 1) fail(op, "window_dimensions must be >= 1, got " + dims_str(window_dims));
  const auto strides = ones_or(op, window_strides, r, "window_strides");
  const auto bdil = ones_or(op, base_dilations, r, "base_dilations");
  const auto wdil = ones_or(op, window_dilations, r, "window_dilations");
  const auto pads = pads_or(op, padding, r);
  TensorType rt{input.elem(), {}};
  for (size_t i = 0; i < r; ++i)
    rt.dims.push_back(window_output_size(input.dims()[i], bdil[i], pads[i].first, pads[i].second,
                                         window_dims[i], wdil[i], strides[i]));
  const TensorType s = scalar_of(input.elem());
  std::string reg = impl_->region(*this, op, {s, s}, binary_body(rop), {s});
  std::string attrs = "window_dimensions = " + i64_array(window_dims) +
                      ", window_strides = " + i64_array(strides) +
                      ", base_dilations = " + i64_array(bdil) +
                      ", window_dilations = " + i64_array(wdil);
  if (any_padding(pads)) attrs += ", padding = " + padding_attr(pads);
  return impl_->emit(op, {input, init}, {reg}, attrs, {rt})[0];
}

Value Builder::select_and_scatter(Value operand, Value source, Value init,
                                  const std::vector<int64_t>& window_dims,
                                  const std::vector<int64_t>& window_strides,
                                  const std::vector<std::pair<int64_t, int64_t>>& padding,
                                  Cmp select_dir, ReduceOp scatter_op) {
  const std::string op = "select_and_scatter";
  const size_t r = static_cast<size_t>(operand.rank());
  check_reduce_op(op, scatter_op, operand.elem());
  if (source.elem() != operand.elem())
    fail(op, "source " + source.type.str() + " and operand " + operand.type.str() + " differ");
  if (init.type != scalar_of(operand.elem()))
    fail(op, "init " + init.type.str() + " must be rank-0 " + mlir_name(operand.elem()));
  if (window_dims.size() != r) fail(op, "window_dimensions needs " + std::to_string(r) + " entries");
  for (int64_t w : window_dims)
    if (w < 1) fail(op, "window_dimensions must be >= 1, got " + dims_str(window_dims));
  const auto strides = ones_or(op, window_strides, r, "window_strides");
  const auto pads = pads_or(op, padding, r);
  // The source holds one value per window position, i.e. reduce_window's shape.
  std::vector<int64_t> windows;
  for (size_t i = 0; i < r; ++i)
    windows.push_back(window_output_size(operand.dims()[i], 1, pads[i].first, pads[i].second,
                                         window_dims[i], 1, strides[i]));
  if (source.dims() != windows)
    fail(op, "source " + source.type.str() + " must have the window grid shape " +
                 dims_str(windows));
  const TensorType s = scalar_of(operand.elem());
  RegionFn sel = [select_dir](Builder& b, const std::vector<Value>& a) -> std::vector<Value> {
    return {b.compare(a[0], a[1], select_dir)};
  };
  std::string select_reg = impl_->region(*this, op, {s, s}, sel, {scalar_of(ElemType::PRED)});
  std::string scatter_reg = impl_->region(*this, op, {s, s}, binary_body(scatter_op), {s});
  std::string attrs = "window_dimensions = " + i64_array(window_dims) +
                      ", window_strides = " + i64_array(strides);
  if (any_padding(pads)) attrs += ", padding = " + padding_attr(pads);
  return impl_->emit(op, {operand, source, init}, {select_reg, scatter_reg}, attrs,
                     {operand.type})[0];
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dim, bool is_stable,
                                 const RegionFn& comparator) {
  const std::string op = "sort";
  if (inputs.empty()) fail(op, "needs at least one input");
  if (dim < 0 || dim >= inputs[0].rank())
    fail(op, "dimension " + std::to_string(dim) + " out of range for " + inputs[0].type.str());
  std::vector<TensorType> args, results;
  for (const auto& in : inputs) {
    if (in.dims() != inputs[0].dims())
      fail(op, "inputs differ in shape: " + in.type.str() + " vs " + inputs[0].type.str());
    args.push_back(scalar_of(in.elem()));  // a_i, b_i pairs
    args.push_back(scalar_of(in.elem()));
    results.push_back(in.type);
  }
  std::string reg = impl_->region(*this, op, args, comparator, {scalar_of(ElemType::PRED)});
  std::string attrs = "dimension = " + std::to_string(dim) +
                      " : i64, is_stable = " + (is_stable ? "true" : "false");
  return impl_->emit(op, inputs, {reg}, attrs, results);
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& init, const RegionFn& cond,
                                       const RegionFn& body) {
  const std::string op = "while";
  if (init.empty()) fail(op, "needs at least one loop-carried value");
  std::vector<TensorType> types;
  for (const auto& v : init) types.push_back(v.type);
  std::string cond_reg = impl_->region(*this, op, types, cond, {scalar_of(ElemType::PRED)});
  std::string body_reg = impl_->region(*this, op, types, body, types);
  return impl_->emit(op, init, {cond_reg, body_reg}, "", types);
}

Value Builder::scatter(Value operand, Value indices, Value updates, const ScatterDims& sd,
                       const ReduceOp* combine, bool indices_are_sorted, bool unique_indices) {
  const std::string op = "scatter";
  if (!(is_signed_int(indices.elem()) || is_unsigned_int(indices.elem())))
    fail(op, "indices must be integers, got " + indices.type.str());
  if (updates.elem() != operand.elem())
    fail(op, "updates " + updates.type.str() + " and operand " + operand.type.str() + " differ");
  if (combine) check_reduce_op(op, *combine, operand.elem());
  const int64_t ivd = sd.index_vector_dim;
  if (ivd < 0 || ivd > indices.rank())
    fail(op, "index_vector_dim " + std::to_string(ivd) + " out of range");
  const int64_t index_len = ivd < indices.rank() ? indices.dims()[ivd] : 1;
  if (static_cast<int64_t>(sd.scatter_dims_to_operand_dims.size()) != index_len)
    fail(op, "scatter_dims_to_operand_dims " + dims_str(sd.scatter_dims_to_operand_dims) +
                 " must have " + std::to_string(index_len) + " entries");
  check_dim_list(op, sd.scatter_dims_to_operand_dims, operand.rank(),
                 "scatter_dims_to_operand_dims");
  std::vector<int64_t> dropped = sd.inserted_window_dims;
  dropped.insert(dropped.end(), sd.input_batching_dims.begin(), sd.input_batching_dims.end());
  check_dim_list(op, dropped, operand.rank(), "inserted_window_dims+input_batching_dims");
  if (sd.input_batching_dims.size() != sd.scatter_indices_batching_dims.size())
    fail(op, "input_batching_dims and scatter_indices_batching_dims differ in length");
  check_dim_list(op, sd.update_window_dims, updates.rank(), "update_window_dims");
  // Updates = scatter (batch) dims of the indices plus one window dim per kept
  // operand dim; window extents may not exceed the operand's.
  std::vector<int64_t> batch, window_limits;
  for (int64_t i = 0; i < indices.rank(); ++i)
    if (i != ivd) batch.push_back(indices.dims()[i]);
  for (int64_t i = 0; i < operand.rank(); ++i)
    if (std::find(dropped.begin(), dropped.end(), i) == dropped.end())
      window_limits.push_back(operand.dims()[i]);
  if (sd.update_window_dims.size() != window_limits.size() ||
      updates.rank() != static_cast<int64_t>(batch.size() + window_limits.size()))
    fail(op, "updates " + updates.type.str() + " do not fit operand " + operand.type.str() +
                 " and indices " + indices.type.str());
  size_t bi = 0, wi = 0;
  for (int64_t i = 0; i < updates.rank(); ++i) {
    auto it = std::find(sd.update_window_dims.begin(), sd.update_window_dims.end(), i);
    bool ok = it != sd.update_window_dims.end() ? updates.dims()[i] <= window_limits[wi++]
                                                 : updates.dims()[i] == batch[bi++];
    if (!ok)
      fail(op, "updates " + updates.type.str() + " dimension " + std::to_string(i) +
                   " does not fit operand " + operand.type.str() + " / indices " +
                   indices.type.str());
  }
  const TensorType s = scalar_of(operand.elem());
  RegionFn body = combine ? binary_body(*combine)
                          : RegionFn([](Builder&, const std::vector<Value>& a) {
                              return std::vector<Value>{a[1]};  // the update replaces
                            });
  std::string reg = impl_->region(*this, op, {s, s}, body, {s});
  std::string dn = "update_window_dims = " + dims_str(sd.update_window_dims) +
                   ", inserted_window_dims = " + dims_str(sd.inserted_window_dims) +
                   ", input_batching_dims = " + dims_str(sd.input_batching_dims) +
                   ", scatter_indices_batching_dims = " +
                   dims_str(sd.scatter_indices_batching_dims) +
                   ", scatter_dims_to_operand_dims = " + dims_str(sd.scatter_dims_to_operand_dims) +
                   ", index_vector_dim = " + std::to_string(ivd);
  std::string attrs = "scatter_dimension_numbers = #stablehlo.scatter<" + dn +
                      ">, indices_are_sorted = " + (indices_are_sorted ? "true" : "false") +
                      ", unique_indices = " + (unique_indices ? "true" : "false");
  return impl_->emit(op, {operand, indices, updates}, {reg}, attrs, {operand.type})[0];
}

}  // namespace tpu::hlo

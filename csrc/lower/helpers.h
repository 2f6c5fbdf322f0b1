// Building blocks shared by the lowering files.
#pragma once

#include <vector>

#include "lower/registry.h"

namespace tpu::lower {

using hlo::ElemType;
using hlo::Value;

// The type arithmetic runs in: float16/bfloat16 compute in float32, as
// PyTorch's CPU kernels do, then round once.
ElemType opmath(ElemType t);

// dot_general of x and y (both of type t) accumulating in opmath(t) and left
// there: float16/bfloat16 products sum in float32, as cuBLAS and PyTorch's
// CPU kernels do; the caller rounds to t once (after any epilogue: addmm's
// beta * self + alpha * product runs in float32 too).
Value dot_acc(hlo::Builder& b, Value x, Value y, const std::vector<int64_t>& lhs_batch,
              const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
              const std::vector<int64_t>& rhs_contract, ElemType t);

// PyTorch's result_type over the given arguments (tensors by dimension
// category, 0-dim tensors, wrapped numbers and Scalars), following
// c10's ResultTypeState rules.
c10::ScalarType result_type(const Ctx& c, const std::vector<size_t>& args);

// Converts and broadcasts `v` to `t` and `dims`.
Value cast(hlo::Builder& b, Value v, ElemType t);

// float32 -> float8 type t with PyTorch's rounding, saturation and NaN rules
// (hlo::Float8Format), as integer ops on the bits (float8.cc).
Value float8_from_f32(hlo::Builder& b, Value f32, ElemType t);
// A lowering's result brought to its output dtype: convert, except that
// float8 on either side goes through cast's float8 rules.
Value cast_result(hlo::Builder& b, Value v, ElemType t);
Value bcast(hlo::Builder& b, Value v, const std::vector<int64_t>& dims);

// Brings a and b to a common shape and element type `t`.
std::pair<Value, Value> align(hlo::Builder& b, Value x, Value y, ElemType t);

Value zeros_like(hlo::Builder& b, Value v);
Value scalar_like(hlo::Builder& b, double f, Value v);  // splat of v's type

// Normalises a possibly negative dim against `rank`.
int64_t wrap_dim(int64_t d, int64_t rank);
std::vector<int64_t> wrap_dims(const std::vector<int64_t>& d, int64_t rank);

// The identity of max (high=false: -inf or the type's minimum) or of min
// (high=true: +inf or the type's maximum) for element type t, rank 0.
Value extreme_value(hlo::Builder& b, ElemType t, bool high);

// Sum over `dims` (keepdim adds size-1 dims back), in the accumulation type.
Value reduce_sum(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim);
Value reduce_max(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim);
Value reduce_min(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim);
// max (or min) that propagates NaN as PyTorch's reductions do (reduce_max and
// reduce_min skip NaN: fine for softmax's shift, wrong for amax/amin/max/min).
Value reduce_extreme_nan(hlo::Builder& b, Value v, const std::vector<int64_t>& dims, bool keepdim,
                         bool max);

// Stable sort of (x, iota) along dim -> (sorted values, their S64 positions);
// NaN sorts as the largest value (last ascending, first descending).
std::pair<Value, Value> sort_with_index(hlo::Builder& b, Value x, int64_t dim, bool descending);

// Registration functions of the lowering files.
void register_elementwise();
void register_reductions();
void register_linalg();
void register_nn();
void register_shape_ops();
void register_factories();
void register_random();
void register_foreach();
// nn op families (norm.cc, activations.cc, conv.cc, pooling.cc, indexing.cc,
// selection.cc, dropout.cc, resize.cc, losses.cc, statistics.cc).
void register_norm();
void register_activations();
void register_conv();
void register_pooling();
void register_indexing();
void register_selection();
void register_dropout();
void register_resize();
void register_losses();
void register_statistics();
void register_histogram();
void register_take_put();  // take_put.cc
// optim.cc, padding.cc, embedding_bag.cc, math.cc, cumulative.cc.
void register_optim();
void register_padding();
void register_embedding_bag();
void register_math();
void register_cumulative();
// misc_math.cc, distributions.cc, order_stats.cc.
void register_misc_math();
void register_distributions();
void register_order_stats();
// distance.cc, grid_sample.cc, adaptive_pool.cc, fold.cc.
void register_distance();
void register_grid_sample();
void register_adaptive_pool();
void register_fold();
// fft.cc.
void register_fft();
// grad_scaler.cc (torch.amp.GradScaler's kernels).
void register_grad_scaler();
// rnn_cells.cc (the fused LSTM/GRU cells behind nn.LSTM / nn.GRU).
void register_rnn_cells();
// scaled_mm.cc (torch._scaled_mm, the float8 matrix product).
void register_scaled_mm();

}  // namespace tpu::lower

// The two kernels behind torch.amp.GradScaler (ATen's AmpKernels): unscaling
// the gradients while checking them for inf/NaN, and the scale update. Both
// stay on the device, so a scaler step costs the one host read CUDA's does
// (GradScaler.step reading found_inf, or none with a fused optimizer that takes
// found_inf itself).
#include <c10/util/Exception.h>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

// A rank-0 PRED: whether any element of the PRED tensor p is set.
Value any_set(hlo::Builder& b, Value p) {
  Value flat = b.reshape(p, {p.type.numel()});
  return b.reduce(flat, b.constant_i(0, ElemType::PRED), {0}, hlo::ReduceOp::Or);
}

// A one-element float32 tensor argument (found_inf, inv_scale, the scale) as rank 0.
Value one_element(Ctx& c, size_t i, const char* what, const char* op) {
  Value v = c.tensor(i);
  TORCH_CHECK(v.type.numel() == 1, op, ": ", what, " must be a 1-element tensor, got shape ",
              c10::IntArrayRef(v.dims()));
  TORCH_CHECK(c.dtype(i) == c10::kFloat, op, ": ", what, " must be a float tensor, got ",
              c.dtype(i));
  return c.b.reshape(v, {});
}

// _amp_foreach_non_finite_check_and_unscale(self[], found_inf, inv_scale)
//   -> (self_out[], found_inf_out)
// Every gradient is multiplied by inv_scale (left as is when inv_scale is 1,
// as CUDA does); found_inf becomes 1 if any element of any gradient is inf or
// NaN and keeps its value otherwise.
std::vector<Value> non_finite_check_and_unscale(Ctx& c) {
  static const char* op = "_amp_foreach_non_finite_check_and_unscale_";
  hlo::Builder& b = c.b;
  auto grads = c.tensors(0);
  const auto& dts = c.arg(0).dtypes;
  Value found = one_element(c, 1, "found_inf", op);
  Value inv = one_element(c, 2, "inv_scale", op);
  Value inv_is_one = b.compare(inv, b.constant_f(1, ElemType::F32), Cmp::EQ);
  Value any = b.constant_i(0, ElemType::PRED);
  std::vector<Value> out;
  for (size_t i = 0; i < grads.size(); ++i) {
    TORCH_CHECK(c10::isFloatingType(dts[i]), op, ": gradients must be floating point, got ",
                dts[i]);
    ElemType st = to_elem(dts[i]);
    Value g = cast(b, grads[i], opmath(st));
    any = b.binary("or", any, any_set(b, b.unary("not", b.unary("is_finite", g))));
    Value scaled = b.mul(g, bcast(b, cast(b, inv, g.elem()), g.dims()));
    out.push_back(cast(b, b.select(inv_is_one, g, scaled), st));
  }
  Value found_out = b.select(any, b.constant_f(1, ElemType::F32), found);
  out.push_back(b.reshape(found_out, c.tensor(1).dims()));
  return out;
}

// _amp_update_scale(self, growth_tracker, found_inf, scale_growth_factor,
//                   scale_backoff_factor, growth_interval) -> (self, growth_tracker)
// After an overflow the scale backs off and the tracker restarts; otherwise
// the tracker counts successful steps and the scale grows every
// growth_interval of them, unless growing would overflow float32.
std::vector<Value> update_scale(Ctx& c) {
  static const char* op = "_amp_update_scale_";
  hlo::Builder& b = c.b;
  Value scale = one_element(c, 0, "current_scale", op);
  Value found = one_element(c, 2, "found_inf", op);
  Value tracker = c.tensor(1);
  TORCH_CHECK(tracker.type.numel() == 1, op, ": growth_tracker must be a 1-element tensor");
  TORCH_CHECK(c.dtype(1) == c10::kInt, op, ": growth_tracker must be an int tensor, got ",
              c.dtype(1));
  tracker = b.reshape(tracker, {});
  const int64_t interval = c.int_arg(5);
  // The factors are doubles: the products round to float32 once, as in ATen's kernels.
  Value s64 = b.convert(scale, ElemType::F64);
  Value grown = b.convert(b.mul(s64, c.scalar(3, ElemType::F64)), ElemType::F32);
  Value backed_off = b.convert(b.mul(s64, c.scalar(4, ElemType::F64)), ElemType::F32);

  Value overflow = b.compare(found, b.constant_f(0, ElemType::F32), Cmp::NE);
  Value successful = b.add(tracker, b.constant_i(1, ElemType::S32));
  Value grow = b.compare(successful, b.constant_i(interval, ElemType::S32), Cmp::EQ);
  Value zero = b.constant_i(0, ElemType::S32);

  Value no_overflow_scale = b.select(grow, b.select(b.unary("is_finite", grown), grown, scale), scale);
  Value new_scale = b.select(overflow, backed_off, no_overflow_scale);
  Value new_tracker = b.select(overflow, zero, b.select(grow, zero, successful));
  return {b.reshape(new_scale, c.tensor(0).dims()), b.reshape(new_tracker, c.tensor(1).dims())};
}

}  // namespace

void register_grad_scaler() {
  add("_amp_foreach_non_finite_check_and_unscale", non_finite_check_and_unscale);
  add("_amp_update_scale", update_scale);
}

}  // namespace tpu::lower

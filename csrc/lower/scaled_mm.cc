// torch._scaled_mm(a [M,K], b [K,N], scale_a, scale_b, bias, scale_result,
// out_dtype, use_fast_accum): the float8 matrix product with dequantisation
// scales, as PyTorch's CPU kernel defines it (_scaled_mm_out_cpu_emulated):
//   out = (a * scale_a) @ (b * scale_b) [+ bias], in float32,
//   times 1/scale_result when out_dtype is float8_e4m3fn or float8_e5m2,
//   then cast to out_dtype (default: a's dtype) with PyTorch's float8 rules.
// Scales are tensor-wise (one float32 each) or row-wise (scale_a [M,1], scale_b
// [1,N], float32). The product multiplies the float8 operands themselves, summing
// in float32 (products of two float8 values are exact in float32), and applies
// the scales to the sums: a float8 matrix unit does the work on a TPU, and the
// result differs from the CPU's scale-first order by float32 rounding only.
// use_fast_accum changes nothing: the sums are always float32. Shapes and
// layouts are free, as on the CPU (CUDA wants multiples of 16).
#include <c10/util/Exception.h>

#include "lower/helpers.h"

namespace tpu::lower {

namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "(";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

int64_t numel(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

}  // namespace

void register_scaled_mm() {
  add("_scaled_mm", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value a = c.tensor(0), m2 = c.tensor(1), sa = c.tensor(2), sb = c.tensor(3);
    TORCH_CHECK(a.rank() == 2 && m2.rank() == 2, "_scaled_mm: inputs must be 2D but got self.dim()=",
                a.rank(), " and mat2.dim()=", m2.rank());
    TORCH_CHECK(hlo::is_float8(a.elem()) && hlo::is_float8(m2.elem()),
                "_scaled_mm: expected both inputs to be float8 types but got self.dtype=", c.dtype(0),
                " and mat2.dtype=", c.dtype(1));
    const int64_t M = a.dims()[0], K = a.dims()[1], N = m2.dims()[1];
    TORCH_CHECK(m2.dims()[0] == K, "_scaled_mm: mat_a and mat_b shapes cannot be multiplied (", M,
                "x", K, " and ", m2.dims()[0], "x", N, ")");
    const bool tensorwise = numel(sa.dims()) == 1 && numel(sb.dims()) == 1;
    const bool rowwise = sa.dims() == std::vector<int64_t>{M, 1} &&
                         sb.dims() == std::vector<int64_t>{1, N};
    TORCH_CHECK_VALUE(
        (tensorwise || rowwise) && sa.elem() == ElemType::F32 && sb.elem() == ElemType::F32,
        "_scaled_mm: invalid scaling configuration: scale_a ", dims_str(sa.dims()), " ", c.dtype(2),
        " and scale_b ", dims_str(sb.dims()), " ", c.dtype(3),
        ". Tensor-wise scaling takes one float32 value each; row-wise scaling takes float32 "
        "scale_a of shape (", M, ", 1) and scale_b of shape (1, ", N, ")");
    std::optional<Value> bias = c.opt_tensor(4);
    TORCH_CHECK(!bias || numel(bias->dims()) == N, "_scaled_mm: bias must be size ", N, " but got ",
                bias ? numel(bias->dims()) : 0);
    std::optional<Value> sr = c.opt_tensor(5);
    TORCH_CHECK(!sr || (numel(sr->dims()) == 1 && sr->elem() == ElemType::F32),
                "_scaled_mm: scale_result must be a float32 scalar");
    const ElemType out_t = to_elem(c.opt_dtype(6).value_or(c.dtype(0)));

    // Operands of two different float8 types meet in bfloat16, which holds both exactly.
    ElemType in_t = a.elem() == m2.elem() ? a.elem() : ElemType::BF16;
    Value acc = dot_acc(b, a, m2, {}, {}, {1}, {0}, in_t);  // float32 sums
    acc = cast(b, acc, ElemType::F32);
    Value scale = tensorwise ? b.mul(b.reshape(sa, {}), b.reshape(sb, {}))
                             : b.mul(bcast(b, sa, {M, N}), bcast(b, sb, {M, N}));
    Value out = b.mul(acc, bcast(b, scale, {M, N}));
    if (bias) out = b.add(out, bcast(b, cast(b, b.reshape(*bias, {N}), ElemType::F32), {M, N}));
    if (sr && (out_t == ElemType::F8E4M3FN || out_t == ElemType::F8E5M2)) {
      Value inv = b.div(b.constant_f(1.0, ElemType::F32), b.reshape(*sr, {}));
      out = b.mul(out, bcast(b, inv, {M, N}));
    }
    return {cast(b, out, out_t)};
  });
  // PyTorch's meta kernel applies CUDA's rules (K and N multiples of 16, a
  // row-major, b column-major) to any tensor it cannot place, and none to a
  // tpu FakeTensor; the checks above are the CPU kernel's, in every mode.
  skip_meta("_scaled_mm");
}

}  // namespace tpu::lower

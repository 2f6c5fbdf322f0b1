// aten::_grouped_mm on tpu, as a decomposition registered for AutogradPrivateUse1.
//
// Why this key: PyTorch's own _grouped_mm is CUDA-shaped. Its CompositeExplicitAutograd
// fallback (which eager tpu reached) requires 16-byte aligned strides, which float32
// expert weights of odd widths do not have, and reads the offsets on the host; its
// meta function, which Dynamo's fake tensors run, accepts only bfloat16, so Mixtral and
// Qwen2-MoE (Transformers picks grouped_mm on tpu for every dtype) failed under
// torch.compile(backend="tpu"). A kernel at the tpu autograd key runs before both
// (fake tensors of a tpu device carry it too), so eager, Defer & Fuse and Dynamo/AOT
// tracing all see the same decomposition into lowered, differentiable ops: no host
// read, static shapes, any float dtype. The price: each group's product is computed
// over all rows and masked, i.e. num_groups times the FLOPs of a real grouped GEMM.
//
// Cases (offs holds each group's end, int32, increasing; rows/columns past offs[-1]
// give zeros, where CUDA leaves them unspecified):
//   2-D a [M, K],  3-D b [G, K, N], offs [G] -> [M, N]    rows of a split into groups
//   3-D a [G, M, K], 2-D b [K, N],  offs [G] -> [M, N]    columns of b split into groups
//   2-D a [M, K],  2-D b [K, N],    offs [G] -> [G, M, N] the shared K split into groups
//   3-D a [G, M, K], 3-D b [G, K, N], no offs -> [G, M, N] a batched matmul
#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpu::aten {

namespace {

// [G, n] float mask: mask[g, i] = 1 where index i lies in group g (offs[g-1] <= i < offs[g]).
at::Tensor group_mask(const at::Tensor& offs, int64_t n, const at::TensorOptions& opts) {
  at::Tensor idx = at::arange(n, offs.options().dtype(at::kLong));
  at::Tensor ends = offs.to(at::kLong);
  // group of index i = how many ends are <= i; G means past the last group.
  at::Tensor group = at::le(ends.unsqueeze(1), idx.unsqueeze(0)).sum(0);  // [n]
  at::Tensor g = at::arange(offs.size(0), idx.options());
  return at::eq(group.unsqueeze(0), g.unsqueeze(1)).to(opts.dtype());     // [G, n]
}

at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& offs,
                      const std::optional<at::Tensor>& bias, std::optional<c10::ScalarType> out_dtype) {
  TORCH_CHECK(a.dim() == 2 || a.dim() == 3, "grouped_mm: mat_a must be 2-D or 3-D, got ", a.dim(), "-D");
  TORCH_CHECK(b.dim() == 2 || b.dim() == 3, "grouped_mm: mat_b must be 2-D or 3-D, got ", b.dim(), "-D");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "grouped_mm: mat_a and mat_b must have the same dtype, got ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(at::isFloatingType(a.scalar_type()), "grouped_mm: expected floating-point inputs, got ",
              a.scalar_type());
  TORCH_CHECK(a.size(-1) == b.size(-2), "grouped_mm: contraction dimension of mat_a (", a.size(-1),
              ") and mat_b (", b.size(-2), ") must match");
  TORCH_CHECK(!(bias.has_value() && bias->defined()), "grouped_mm: bias is not supported (as on CUDA)");
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  TORCH_CHECK(offs.has_value() == (a2 || b2),
              "grouped_mm: offs is required when an operand is 2-D and not allowed when both are 3-D");
  at::Tensor out;
  if (!a2 && !b2) {
    TORCH_CHECK(a.size(0) == b.size(0), "grouped_mm: batch sizes differ: ", a.size(0), " vs ", b.size(0));
    out = at::bmm(a, b);
  } else {
    const at::Tensor& o = *offs;
    TORCH_CHECK(o.dim() == 1 && (o.scalar_type() == at::kInt || o.scalar_type() == at::kLong),
                "grouped_mm: offs must be a 1-D int32 tensor, got ", o.dim(), "-D ", o.scalar_type());
    const int64_t groups = o.size(0);
    if (a2 && !b2) {
      TORCH_CHECK(b.size(0) == groups, "grouped_mm: mat_b has ", b.size(0), " groups but offs has ", groups);
      at::Tensor mask = group_mask(o, a.size(0), a.options());           // [G, M]
      at::Tensor all = at::matmul(a.unsqueeze(0), b);                     // [G, M, N]
      out = (all * mask.unsqueeze(2)).sum(0);
    } else if (!a2 && b2) {
      TORCH_CHECK(a.size(0) == groups, "grouped_mm: mat_a has ", a.size(0), " groups but offs has ", groups);
      at::Tensor mask = group_mask(o, b.size(1), b.options());           // [G, N]
      at::Tensor all = at::matmul(a, b.unsqueeze(0));                     // [G, M, N]
      out = (all * mask.unsqueeze(1)).sum(0);
    } else {
      at::Tensor mask = group_mask(o, a.size(1), a.options());           // [G, K]
      out = at::matmul(a.unsqueeze(0) * mask.unsqueeze(1), b);            // [G, M, N]
    }
  }
  if (out_dtype.has_value() && *out_dtype != out.scalar_type()) out = out.to(*out_dtype);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_grouped_mm", TORCH_FN(grouped_mm));
}

}  // namespace tpu::aten

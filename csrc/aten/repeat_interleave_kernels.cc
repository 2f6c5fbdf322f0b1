// repeat_interleave.Tensor(repeats): index i repeated repeats[i] times, on the device.
// The result's length is sum(repeats): unless output_size gives it, the op
// synchronises once (as on CUDA) to read that sum, together with the smallest repeat
// for the "can not be negative" check. The indices themselves come from lowered ops:
// out[j] = #{ i : cumsum(repeats)[i] <= j } = bucketize(j, cumsum(repeats), right=True).
// A given output_size is trusted, without a sync (as CUDA's kernel does).
// The self_int / self_Tensor overloads (x.repeat_interleave(r, dim)) are composites
// over this one plus index_select, so they run on the device too.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace tpu::aten {

namespace {

at::Tensor repeat_interleave_kernel(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  if (repeats.numel() == 0) return at::empty({0}, repeats.options());
  int64_t total;
  if (output_size.has_value()) {
    total = output_size->guard_int(__FILE__, __LINE__);
  } else {
    at::Tensor facts = at::stack({repeats.sum().to(at::kLong), repeats.min().to(at::kLong)}).cpu();
    TORCH_CHECK(facts[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = facts[0].item<int64_t>();
  }
  at::Tensor ends = at::cumsum(repeats, 0, repeats.scalar_type());
  at::Tensor positions = at::arange(total, repeats.options());
  return at::bucketize(positions, ends, /*out_int32=*/repeats.scalar_type() == at::kInt, /*right=*/true);
}

}  // namespace

void register_repeat_interleave_kernels(torch::Library& m) {
  m.impl("repeat_interleave.Tensor", TORCH_FN(repeat_interleave_kernel));
}

}  // namespace tpu::aten

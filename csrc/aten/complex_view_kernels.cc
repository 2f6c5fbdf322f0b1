// view_as_real / view_as_complex on tpu: metadata-only views, as on CPU and CUDA.
// A complex tensor and its float view share one storage; the storage's buffer
// keeps whichever element type last wrote it, and a read through the other dtype
// pairs or splits (real, imag) in the program (reinterpret in op_emit.cc).
// FNet's Fourier mixing and Llama 4's complex rotary embedding use them; as CPU
// fallbacks they could not alias the input, so a write through the view was lost.
#include <ATen/ATen.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <torch/library.h>

namespace tpu::aten {

void register_complex_view_kernels(torch::Library& m) {
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

}  // namespace tpu::aten

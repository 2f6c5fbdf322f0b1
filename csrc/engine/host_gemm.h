// Matrix products of programs on the CPU plugin, run by PyTorch's own CPU GEMM.
//
// On the CPU plugin XLA runs a dot through Eigen, one matrix at a time for a
// batched dot, and packs a transposed operand itself; PyTorch's CPU backend
// runs the same products through MKL (batched, transposes as BLAS flags).
// Measured on the GPT step's shapes, the weight-gradient product g^T @ x and the
// attention's batched products are 1.4-2x slower in XLA (docs/performance.md).
// With TORCH_TPU_CPU_HOST_GEMM=1 (off by default: in the GPT step it has not yet
// measured faster), float32 products of the forms a BLAS takes (hlo/host_gemm.h)
// become typed FFI custom calls "torch_tpu.gemm_{nn,nt,tn,tt}"
// whose handlers call at::cpu::mm_out / bmm_out on the program's buffers.
#pragma once

#include "pjrt_c_api.h"

namespace tpu::engine {

// Registers the handlers with the plugin (before its first compile) and turns on
// hlo::set_host_gemm; true when it did. False, registering nothing, when the build
// has no XLA FFI header, TORCH_TPU_CPU_HOST_GEMM is off, or the plugin has no FFI
// extension.
bool register_host_gemm(const PJRT_Api* api);

// Whether register_host_gemm succeeded in this process.
bool host_gemm_enabled();

}  // namespace tpu::engine

// Float32 products as calls into the host's GEMM (the CPU plugin; engine/host_gemm.h).
#pragma once

#include <cstdint>

namespace tpu::hlo {

// From now on, in every Builder of the process, float32 dot_generals of the forms
// a BLAS takes (rank 2, or rank 3 batched over dimension 0; one contracting
// dimension; either operand transposed) of at least kHostGemmMinWork
// multiply-adds become typed custom calls "torch_tpu.gemm_{nn,nt,tn,tt}" (n: the
// operand as stored, t: transposed), of the same operands and result. Set once,
// before the first program, by the runtime that registered their handlers.
void set_host_gemm(bool on);
bool host_gemm();
constexpr int64_t kHostGemmMinWork = int64_t{1} << 18;

}  // namespace tpu::hlo

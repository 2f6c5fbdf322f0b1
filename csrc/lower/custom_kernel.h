// Custom kernels: ops of any namespace whose lowering is a user's StableHLO
// module (torch_tpu.kernels: stablehlo_op, jax_op). The lowering inlines the
// module into the program being built (hlo::Builder::call_module), so the kernel
// runs inside the same program in every mode.
#pragma once

#include <string>
#include <vector>

namespace tpu::lower {

// Registers the lowering of `op_name` ("ns::name", the functional overload) once.
// `static_args` lists float arguments whose values select a variant instead of
// becoming runtime parameters (JAX static arguments).
void add_custom_kernel(const std::string& op_name, const std::vector<int>& static_args);

// Adds one module for `op_name`: it serves calls whose tensor arguments (in
// schema order) have the types of the module's @main parameters and whose
// non-tensor arguments format to `static_key` (custom_kernel_static_key).
// Throws std::invalid_argument when the module's @main cannot be read.
void add_custom_kernel_variant(const std::string& op_name, const std::string& mlir_text,
                               const std::string& static_key);

// Number of variants of `op_name` (tests, debugging).
size_t custom_kernel_variants(const std::string& op_name);

}  // namespace tpu::lower

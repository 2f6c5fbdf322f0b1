// Registers the kernels with PyTorch's dispatcher at module import.
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <iostream>
#include <set>

#include "aten/deferred_graph.h"
#include "aten/kernels.h"
#include "aten/op_info.h"
#include "aten/op_kernel.h"
#include "aten/python_site.h"
#include "engine/metrics.h"

namespace tpu::aten {

void register_unique_kernels(torch::Library& m);             // unique_kernels.cc
void register_repeat_interleave_kernels(torch::Library& m);  // repeat_interleave_kernels.cc
void register_complex_view_kernels(torch::Library& m);       // complex_view_kernels.cc

namespace {

// Ops run on the CPU: warn once per op, count every call (torch_tpu.debug.metrics()),
// and remember the Python line of the first call so that report() can say where.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = full_name(op.schema().operator_name());
  if (engine::metrics().note_fallback(name)) {
    engine::metrics().note_fallback_site(name, python_site());
    TORCH_WARN("torch_tpu: ", name, " has no tpu lowering and runs on the CPU (copying its "
               "inputs to the host and back). torch_tpu.debug.metrics() counts such ops.");
  }
  FlushReason reason("cpu fallback");
  at::native::cpu_fallback(op, stack);
}

// Kernels registered by hand; the generic kernel must not shadow them.
const std::set<std::string>& hand_written() {
  static const std::set<std::string> s = {
      "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view",
      "aten::_reshape_alias", "aten::unfold", "aten::alias", "aten::resize_",
      "aten::set_.source_Storage_storage_offset", "aten::set_.source_Storage",
      "aten::set_.source_Tensor", "aten::set_", "aten::_local_scalar_dense", "aten::copy_",
      "aten::_copy_from", "aten::_copy_from_and_resize", "aten::native_batch_norm",
      "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.no_stats",
      "aten::_native_batch_norm_legit_no_training", "aten::nonzero", "aten::masked_select",
      "aten::_embedding_bag_backward", "aten::record_stream",
      "aten::_has_compatible_shallow_copy_type", "aten::zero_"};
  return s;
}

}  // namespace

void register_all_kernels() {
  static bool done = false;
  if (done) return;
  done = true;
  lower::register_all();
  // Libraries live for the whole process (they deregister when destroyed).
  auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                 __FILE__, __LINE__);
  register_tensor_kernels(*lib);
  register_copy_kernels(*lib);
  register_batch_norm_kernel(*lib);
  register_data_dependent_kernels(*lib);
  register_unique_kernels(*lib);
  register_repeat_interleave_kernels(*lib);
  register_complex_view_kernels(*lib);
  register_sparse_kernels(*lib);
  for (const auto& op : lowered_ops()) {
    std::string name = full_name(op.schema().operator_name());
    if (hand_written().count(name)) continue;
    // A backend kernel on a CompositeImplicitAutograd op would bypass its
    // decomposition under autograd: leave those to PyTorch.
    if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    lib->impl(name.substr(6).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
  }
  auto* fallback = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                      __FILE__, __LINE__);
  fallback->fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  register_autocast_kernels();
}

}  // namespace tpu::aten

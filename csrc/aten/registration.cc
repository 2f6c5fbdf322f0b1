// Registers the kernels with PyTorch's dispatcher at module import.
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <iostream>
#include <map>
#include <mutex>
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
void register_fbgemm_kernels();                              // fbgemm_kernels.cc
void register_tbe_fused_kernels();                           // tbe_fused_kernels.cc

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
      "aten::_has_compatible_shallow_copy_type", "aten::zero_",
      "fbgemm::permute_2D_sparse_data", "fbgemm::permute_1D_sparse_data"};
  return s;
}

}  // namespace

std::vector<std::string> register_lowered_ops(const std::string& ns) {
  // Libraries live for the whole process (they deregister when destroyed), one per
  // namespace; an op's kernel is registered once.
  static std::mutex mu;
  static std::map<std::string, torch::Library*> libraries;
  static std::set<std::string> done;
  std::lock_guard<std::mutex> g(mu);
  std::vector<std::string> added;
  for (const auto& op : lowered_ops(ns)) {
    std::string name = full_name(op.schema().operator_name());
    if (hand_written().count(name) || done.count(name)) continue;
    // A backend kernel on a CompositeImplicitAutograd op would bypass its
    // decomposition under autograd: leave those to PyTorch.
    if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
    torch::Library*& lib = libraries[ns];
    if (!lib)
      lib = new torch::Library(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__,
                               __LINE__);
    lib->impl(name.substr(ns.size() + 2).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
    done.insert(name);
    added.push_back(name);
  }
  // Lowerings of ops not defined yet (a library such as fbgemm loads after us): the
  // kernel is registered by name and takes effect when the library defines the op.
  // Only ops we lower on purpose are named in the registry, none of them composite.
  const std::string prefix = ns + "::";
  for (const auto& [name, low] : lower::all()) {
    if (name.rfind(prefix, 0) != 0 || hand_written().count(name) || done.count(name)) continue;
    auto dot = name.find('.', prefix.size());
    c10::OperatorName opname(name.substr(0, dot),
                             dot == std::string::npos ? "" : name.substr(dot + 1));
    if (c10::Dispatcher::singleton().findSchema(opname)) continue;
    torch::Library*& lib = libraries[ns];
    if (!lib)
      lib = new torch::Library(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__,
                               __LINE__);
    lib->impl(name.substr(prefix.size()).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
    done.insert(name);
    added.push_back(name);
  }
  return added;
}

void register_all_kernels() {
  static bool done = false;
  if (done) return;
  done = true;
  lower::register_all();
  auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                 __FILE__, __LINE__);
  register_tensor_kernels(*lib);
  register_copy_kernels(*lib);
  register_batch_norm_kernel(*lib);
  register_no_grad_composites(*lib);
  register_data_dependent_kernels(*lib);
  register_unique_kernels(*lib);
  register_repeat_interleave_kernels(*lib);
  register_complex_view_kernels(*lib);
  register_sparse_kernels(*lib);
  register_fbgemm_kernels();
  register_tbe_fused_kernels();
  // Every namespace with a lowering whose ops exist now (aten, tpu; a library
  // loaded later registers its own through register_lowered_ops).
  std::set<std::string> namespaces;
  for (const auto& [name, low] : lower::all()) namespaces.insert(name.substr(0, name.find("::")));
  for (const auto& ns : namespaces) register_lowered_ops(ns);
  auto* fallback = new torch::Library(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                      __FILE__, __LINE__);
  fallback->fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
  register_autocast_kernels();
}

}  // namespace tpu::aten

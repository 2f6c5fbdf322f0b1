// The torch_tpu._C Python module: runtime set-up, device queries, memory and
// metrics, used by torch_tpu/*.py.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "aten/deferred_graph.h"
#include "aten/generator.h"
#include "aten/host_tier.h"
#include "aten/kernels.h"
#include "aten/op_info.h"
#include "aten/op_kernel.h"
#include "aten/tpu_tensor.h"
#include "engine/compile_pool.h"
#include "engine/host_gemm.h"
#include "engine/disk_cache.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/device_checks.h"
#include "engine/host_heap.h"
#include "engine/runtime.h"
#include "hlo/call_module.h"
#include "lower/custom_kernel.h"
#include "lower/registry.h"

namespace tpu::aten {
void register_hooks();
void bind_modes(pybind11::module& m);
void bind_deferred_buckets(pybind11::module& m);
void bind_compiled(pybind11::module& m);
void install_flush_hook();
}
namespace tpu::dist {
void bind_distributed(pybind11::module& m);
}

namespace py = pybind11;
using tpu::engine::Runtime;

namespace {

// PJRT failures become RuntimeError with PJRT's message; a bad device index too
// (not pybind's IndexError), so that torch.tpu.set_device(9) raises what
// torch.ones(2, device="tpu:9") raises, as CUDA does.
template <typename F>
auto guarded(F f) {
  try {
    return f();
  } catch (const tpu::pjrt::Error& e) {
    throw std::runtime_error(e.what());
  } catch (const std::out_of_range& e) {
    throw std::runtime_error(e.what());
  } catch (const tpu::engine::CheckFailure& e) {
    if (e.kind() == tpu::engine::CheckSpec::kIndexError) throw py::index_error(e.what());
    throw std::runtime_error(e.what());
  }
}

py::dict metrics_dict() {
  // Strict Eager's pipelined ops run (and their programs finish compiling) first:
  // the counts then cover every op called so far, as they do without the pipeline.
  tpu::aten::flush_pipelined("metrics read");
  auto& m = tpu::engine::metrics();
  py::dict d;
  d["ops_executed"] = m.ops_executed.load();
  d["programs_compiled"] = m.programs_compiled.load();
  d["compile_seconds"] = m.compile_ns.load() / 1e9;
  d["cache_hits"] = m.cache_hits.load();
  d["cache_misses"] = m.cache_misses.load();
  d["executions"] = m.executions.load();
  d["donated_inputs"] = m.donated_inputs.load();
  d["bytes_to_device"] = m.bytes_to_device.load();
  d["bytes_to_host"] = m.bytes_to_host.load();
  d["cpu_fallback_ops"] = m.cpu_fallback_ops.load();
  d["host_tier_ops"] = m.host_tier_ops.load();
  py::dict fb;
  for (const auto& [k, v] : m.fallback_counts()) fb[py::str(k)] = v;
  d["cpu_fallback_counts"] = fb;
  py::dict sites;
  for (const auto& [k, v] : m.fallback_sites()) sites[py::str(k)] = v;
  d["cpu_fallback_sites"] = sites;
  d["disk_hits"] = m.disk_hits.load();
  d["disk_misses"] = m.disk_misses.load();
  d["disk_bad_entries"] = m.disk_bad_entries.load();
  d["disk_writes"] = m.disk_writes.load();
  d["disk_write_failures"] = m.disk_write_failures.load();
  d["disk_bytes_read"] = m.disk_bytes_read.load();
  d["disk_bytes_written"] = m.disk_bytes_written.load();
  d["disk_evictions"] = m.disk_evictions.load();
  d["disk_load_seconds"] = m.deserialize_ns.load() / 1e9;
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tpu native core";
  tpu::aten::bind_modes(m);
  tpu::aten::bind_deferred_buckets(m);
  tpu::aten::bind_compiled(m);
  tpu::dist::bind_distributed(m);
  m.def("_register", [] {
    tpu::aten::install_flush_hook();
    tpu::aten::register_hooks();
    tpu::aten::register_all_kernels();
  });
  m.def("_configure", [](const std::string& platform, const std::string& path, int64_t cpu_devices,
                         bool plugin_logs, bool keep_cpu_heap) {
    Runtime::get().configure(platform, path, cpu_devices, plugin_logs, keep_cpu_heap);
  });
  m.def("_host_memory_kept", &tpu::engine::host_memory_kept);
  m.def("_host_gemm_enabled", [] {  // products as calls into PyTorch's CPU GEMM (engine/host_gemm.h)
    return guarded([] { Runtime::get().client(); return tpu::engine::host_gemm_enabled(); });
  });
  m.def("_initialized", [] { return Runtime::get().initialized(); });
  // Registered with atexit (torch_tpu/__init__.py): no background compile runs or
  // is destroyed while the interpreter and the process tear down (engine/compile_pool.h).
  m.def("_close_background_compiles", [] {
    tpu::engine::close_background();  // the dropped jobs' references released here, with the GIL
    py::gil_scoped_release no_gil;
    tpu::engine::wait_background_idle();
  });
  m.def("_init", [] { guarded([] { Runtime::get().client(); return 0; }); });
  m.def("_device_count", [] { return guarded([] { return Runtime::get().device_count(); }); });
  m.def("_platform_name", [] { return guarded([] { return Runtime::get().client().platform_name(); }); });
  m.def("_platform_version", [] {
    return guarded([] { return Runtime::get().client().platform_version(); });
  });
  m.def("_device_kind", [](int i) {
    return guarded([i] {
      Runtime::get().check_device(i);
      return Runtime::get().client().devices()[i].kind;
    });
  });
  m.def("_plugin_path", [] { return Runtime::get().plugin_path(); });
  m.def("_platform", [] { return Runtime::get().platform(); });
  m.def("_check_device", [](int i) { guarded([i] { Runtime::get().check_device(i); return 0; }); });
  m.def("_synchronize", [](int device) {
    py::gil_scoped_release nogil;
    guarded([device] {
      tpu::aten::flush_all_pending("synchronize");
      tpu::engine::synchronize(device);
      tpu::engine::raise_failed_checks(device);
      return 0;
    });
  });
  m.def("_memory_allocated", [](int d) {
    tpu::aten::settle_for_memory_query();
    return Runtime::get().allocated(d);
  });
  m.def("_set_memory_limit", [](int64_t bytes) { Runtime::get().set_memory_limit(bytes); });
  m.def("_set_memory_fraction", [](double f, int d) {
    try {
      Runtime::get().set_memory_fraction(d, f);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  });
  m.def("_max_memory_allocated", [](int d) {
    tpu::aten::settle_for_memory_query();
    return Runtime::get().peak(d);
  });
  m.def("_allocation_count", [](int d) { return Runtime::get().alloc_count(d); });
  m.def("_reset_peak_memory_stats", [](int d) {
    tpu::aten::settle_for_memory_query();
    Runtime::get().reset_peak(d);
  });
  m.def("_metrics", &metrics_dict);
  m.def("_reset_metrics", [] { tpu::engine::metrics().reset(); });
  m.def("_set_launch_blocking", &tpu::engine::set_launch_blocking);
  m.def("_launch_blocking", &tpu::engine::launch_blocking);
  // Compiles a StableHLO module as an op program would be (tests of compile errors).
  m.def("_compile_program", [](const std::string& mlir, const std::string& what) {
    guarded([&] { tpu::engine::compile_program(mlir, what); return 0; });
  });
  m.def("_clear_program_cache", &tpu::aten::clear_program_cache);
  m.def("_set_host_tier", &tpu::aten::set_host_tier_enabled);
  m.def("_host_tier", &tpu::aten::host_tier_enabled);
  m.def("_set_pipelined_compile", &tpu::aten::set_pipelined_compile);
  m.def("_pipelined_compile", &tpu::aten::pipelined_compile);
  // Fault injection (tests): launches whose op names contain `text` fail
  // asynchronously on the device ("" : off); see engine/async_errors.h.
  m.def("_debug_fail_execute", &tpu::engine::set_fail_execute);
  // Device-side checks (TORCH_TPU_CHECKS): programs built under the old setting
  // are dropped so that every later program follows the new one.
  m.def("_device_checks_enabled", [] { return tpu::lower::checks_enabled(); });
  m.def("_set_device_checks", [](bool on) {
    py::gil_scoped_release nogil;
    tpu::aten::flush_all_pending("device checks switched");
    // The program caches keep programs with and without checks apart.
    tpu::lower::set_checks_enabled(on);
  });
  // Persistent compile cache (torch_tpu/cache.py).
  m.def("_cache_configure", &tpu::engine::configure_disk_cache);
  m.def("_cache_info", [] {
    auto& c = tpu::engine::DiskCache::get();
    uint64_t entries = 0, bytes = 0;
    if (c.enabled()) c.usage(&entries, &bytes);
    py::dict d;
    d["dir"] = c.dir();
    d["enabled"] = c.enabled();
    d["max_bytes"] = c.max_bytes();
    d["disk_entries"] = entries;
    d["disk_bytes"] = bytes;
    return d;
  });
  m.def("_cache_clear_disk", [] { return tpu::engine::DiskCache::get().clear(); });
  m.def("_set_dump_dir", &tpu::engine::set_dump_dir);
  m.def("_dump_dir", &tpu::engine::dump_dir);
  m.def("_program_cache_size", &tpu::aten::program_cache_size);
  m.def("_lowered_op_names", [] {
    std::vector<std::string> names;
    for (const auto& op : tpu::aten::lowered_ops())
      names.push_back(tpu::aten::full_name(op.schema().operator_name()));
    return names;
  });
  m.def("_register_lowered_ops", &tpu::aten::register_lowered_ops);
  // Custom kernels (torch_tpu/kernels): a registry lowering that inlines a
  // StableHLO module, and the modules it picks from by call signature.
  m.def("_register_custom_kernel", &tpu::lower::add_custom_kernel);
  m.def("_add_custom_kernel_variant", &tpu::lower::add_custom_kernel_variant);
  m.def("_custom_kernel_variants", &tpu::lower::custom_kernel_variants);
  // [(element type "f32", [dims...]) ...] of @main's parameters and results.
  m.def("_stablehlo_signature", [](const std::string& text) {
    auto sig = tpu::hlo::module_signature(text);
    auto conv = [](const std::vector<tpu::hlo::TensorType>& ts) {
      std::vector<std::pair<std::string, std::vector<int64_t>>> out;
      for (const auto& t : ts) out.emplace_back(tpu::hlo::mlir_name(t.elem), t.dims);
      return out;
    };
    return py::make_tuple(conv(sig.params), conv(sig.results));
  });
  m.def("_lowering_names", [] {
    std::vector<std::string> names;
    for (const auto& [k, v] : tpu::lower::all()) names.push_back(k);
    return names;
  });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(tpu::aten::default_generator(device)));
  });
  m.def("_current_device", [] { return tpu::aten::current_device(); });
  m.def("_set_device", [](int d) {
    guarded([d] { Runtime::get().check_device(d); return 0; });
    tpu::aten::set_current_device(d);
  });
}

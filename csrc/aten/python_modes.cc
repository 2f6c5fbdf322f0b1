// Python bindings of the execution modes and the pending graph.
#include <torch/csrc/utils/pybind.h>

#include "aten/deferred_graph.h"
#include "aten/recording_time.h"
#include "engine/execution_mode.h"
#include "engine/executor.h"

namespace py = pybind11;

namespace tpu::aten {

void bind_modes(py::module& m) {
  m.def("_set_execution_mode", [](int mode) {
    if (engine::default_mode() == engine::Mode::kDeferAndFuse && mode != 1)
      flush_pending("mode switch");
    engine::set_default_mode(static_cast<engine::Mode>(mode));
  });
  m.def("_execution_mode", [] { return static_cast<int>(engine::default_mode()); });
  m.def("_set_thread_mode", [](int mode) { engine::set_thread_override(mode); });
  m.def("_thread_mode", [] { return engine::thread_override(); });
  m.def("_current_mode", [] { return static_cast<int>(engine::current_mode()); });
  m.def("_flush", [](const std::string& reason) {
    py::gil_scoped_release nogil;
    flush_pending(reason);
  });
  m.def("_pending_nodes", [] { return pending_nodes(); });
  m.def("_set_max_graph_nodes", [](size_t n) { set_max_graph_nodes(n); });
  m.def("_max_graph_nodes", [] { return max_graph_nodes(); });
  m.def("_clear_fused_cache", [] { clear_fused_cache(); });
  m.def("_reset_deferred_stats", [] { reset_deferred_stats(); });
  // {op name: (calls, seconds)} of Defer & Fuse recording inside the generic
  // kernel since the last reset (reset=True zeroes the counters after reading).
  m.def("_recording_by_op", [](bool reset) {
    py::dict d;
    for (const auto& r : recording_by_op(reset)) d[py::str(r.op)] = py::make_tuple(r.calls, r.ns * 1e-9);
    return d;
  }, py::arg("reset") = false);
  m.def("_deferred_stats", [] {
    DeferredStats s = deferred_stats();
    py::dict d;
    d["ops_recorded"] = s.ops_recorded;
    d["graphs_run"] = s.graphs_run;
    d["graph_nodes_total"] = s.graph_nodes_total;
    d["largest_graph"] = s.largest_graph;
    d["fused_cache_hits"] = s.fused_cache_hits;
    d["fused_cache_misses"] = s.fused_cache_misses;
    d["graphs_run_by_node"] = s.graphs_run_by_node;
    d["graphs_run_bucketed"] = s.graphs_run_bucketed;
    d["nodes_run_by_node"] = s.nodes_run_by_node;
    d["graphs_pipelined"] = s.graphs_pipelined;
    d["nodes_pipelined"] = s.nodes_pipelined;
    py::dict reasons;
    for (const auto& [k, v] : s.materializations) reasons[py::str(k)] = v;
    d["materializations"] = reasons;
    return d;
  });
}

}  // namespace tpu::aten

// Python bindings of compiled-graph capture and CompiledTrace (used by
// torch_tpu/dynamo/graph_runner.py).
#include <torch/csrc/utils/pybind.h>

#include "aten/compiled_trace.h"

namespace py = pybind11;

namespace tpu::aten {

namespace {

py::dict run_info(const RunInfo& info) {
  py::dict d;
  d["ran"] = info.ran;
  d["compiled"] = info.compiled;
  d["compile_seconds"] = info.compile_seconds;
  return d;
}

}  // namespace

void bind_compiled(py::module& m) {
  py::class_<CompiledTrace, std::shared_ptr<CompiledTrace>>(m, "_CompiledTrace")
      .def("matches", &CompiledTrace::matches)
      .def("run", &CompiledTrace::run, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("calls", &CompiledTrace::calls)
      .def_property_readonly("num_params", &CompiledTrace::num_params);
  m.def("_begin_capture", [] {
    py::gil_scoped_release nogil;
    return begin_capture();
  });
  m.def("_end_capture", [] {
    RunInfo info;
    {
      py::gil_scoped_release nogil;
      end_capture(info);
    }
    return run_info(info);
  });
  // (trace or None, what the flush did, why there is no trace)
  m.def("_capture", [](const std::vector<at::Tensor>& inputs,
                       const std::vector<std::optional<at::Tensor>>& results, uint64_t runs_before) {
    std::vector<at::Tensor> rs;
    for (const auto& r : results) rs.push_back(r.has_value() ? *r : at::Tensor());
    RunInfo info;
    std::string why;
    std::shared_ptr<CompiledTrace> t;
    {
      py::gil_scoped_release nogil;
      t = CompiledTrace::capture(inputs, rs, runs_before, info, why);
    }
    return py::make_tuple(t ? py::cast(t) : py::none(), run_info(info), why);
  });
}

}  // namespace tpu::aten

// Python bindings of compiled-graph capture and CompiledTrace (used by
// torch_tpu/dynamo/graph_runner.py).
#include <torch/csrc/autograd/python_variable.h>
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

// The CompiledTraces of one FX graph (one per input layout), called with the
// graph's boxed argument list in one step: the hot path of every compiled call,
// so it converts the arguments once and does no Python-level work per trace.
class CompiledTraceSet {
 public:
  void add(std::shared_ptr<CompiledTrace> t) { traces_.push_back(std::move(t)); }
  size_t size() const { return traces_.size(); }

  // (index of the trace that ran, its results) with `args` emptied (so that the
  // caller's saved activations die as soon as the program no longer needs
  // them), or None, args untouched, when no trace fits the arguments.
  py::object call(py::list args) {
    std::vector<at::Tensor> in;
    in.reserve(args.size());
    for (py::handle h : args) {
      if (!THPVariable_Check(h.ptr())) return py::none();
      in.push_back(THPVariable_Unpack(h.ptr()));
    }
    for (size_t i = 0; i < traces_.size(); ++i) {
      if (!traces_[i]->matches(in)) continue;
      std::vector<at::Tensor> res;
      {
        py::gil_scoped_release nogil;
        res = traces_[i]->run(in);
      }
      if (PyList_SetSlice(args.ptr(), 0, PyList_GET_SIZE(args.ptr()), nullptr) != 0)
        throw py::error_already_set();
      in.clear();
      py::list out(res.size());
      for (size_t k = 0; k < res.size(); ++k)
        PyList_SET_ITEM(out.ptr(), k, THPVariable_Wrap(std::move(res[k])));
      return py::make_tuple(i, std::move(out));
    }
    return py::none();
  }

 private:
  std::vector<std::shared_ptr<CompiledTrace>> traces_;
};

}  // namespace

void bind_compiled(py::module& m) {
  py::class_<CompiledTrace, std::shared_ptr<CompiledTrace>>(m, "_CompiledTrace")
      .def("matches", &CompiledTrace::matches)
      .def("run", &CompiledTrace::run, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("calls", &CompiledTrace::calls)
      .def_property_readonly("num_params", &CompiledTrace::num_params);
  py::class_<CompiledTraceSet>(m, "_CompiledTraceSet")
      .def(py::init<>())
      .def("add", &CompiledTraceSet::add)
      .def("__len__", &CompiledTraceSet::size)
      .def("__call__", &CompiledTraceSet::call);
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

// Hands a Defer & Fuse trace to the Python bucket hook (see deferred_buckets.h).
//
// The trace goes to Python as plain values: per node its op, each argument's
// descriptor (a tensor as where it reads from -- a trace slot or a parameter --
// and its view: sizes, strides, offset; scalars and other arguments as values)
// and its results (the slot each one defines or rewrites, with sizes); per
// parameter its buffer wrapped as a flat tpu tensor, or its host value. The
// hook answers one real-size tpu tensor per output slot (or None: run as usual),
// whose buffers fulfil the slots. Its own ops record into a side trace, since
// the flushing trace's lock is held here.
#include "aten/deferred_buckets.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "aten/deferred_graph.h"
#include "aten/tpu_tensor.h"
#include "lower/registry.h"

namespace py = pybind11;

namespace tpu::aten {

namespace {

// Set by _set_deferred_bucket_hook; never freed (no Python object may be freed
// after the interpreter).
py::object* g_hook = nullptr;
// While this thread runs the hook: the trace its ops record into (see side_trace).
thread_local std::shared_ptr<Trace> t_side;

struct Decline {};

// note_upload_shape's table: buffer -> (the buffer, while alive; its shape).
struct UploadShapes {
  std::mutex mu;
  std::unordered_map<const pjrt::Buffer*, std::pair<std::weak_ptr<pjrt::Buffer>, std::vector<int64_t>>> m;
};
UploadShapes& upload_shapes() {
  static auto* u = new UploadShapes();
  return *u;
}

py::tuple ints(const std::vector<int64_t>& v) {
  py::tuple t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
  return t;
}

py::object upload_shape_py(const std::shared_ptr<pjrt::Buffer>& buf) {
  UploadShapes& u = upload_shapes();
  std::lock_guard<std::mutex> g(u.mu);
  auto it = u.m.find(buf.get());
  if (it == u.m.end() || it->second.first.lock() != buf) return py::none();
  return ints(it->second.second);
}

py::object dtype_py(c10::ScalarType t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t)));
}

py::object host_value(const TraceParam& p) {
  const char* b = p.host.bytes;
  switch (p.type.elem) {
    case hlo::ElemType::F64: { double x; std::memcpy(&x, b, 8); return py::float_(x); }
    case hlo::ElemType::F32: { float x; std::memcpy(&x, b, 4); return py::float_(x); }
    case hlo::ElemType::S64: { int64_t x; std::memcpy(&x, b, 8); return py::int_(x); }
    case hlo::ElemType::S32: { int32_t x; std::memcpy(&x, b, 4); return py::int_(x); }
    case hlo::ElemType::PRED: return py::bool_(b[0] != 0);
    default: throw Decline{};
  }
}

py::object ref_py(const Trace& g, const Node& n, const TensorRef& r) {
  if (!r.defined) return py::none();
  const NodeInput& ni = n.ins.at(r.input);
  if (r.host_scalar) {
    if (ni.internal) throw Decline{};
    const TraceParam& p = g.params.at(ni.id);
    if (p.buffer || p.host.kind != Input::kHost || !p.type.dims.empty()) throw Decline{};
    return py::make_tuple("H", host_value(p), dtype_py(r.dtype));
  }
  return py::make_tuple("T", ni.internal, ni.id, ints(r.layout.sizes), ints(r.layout.strides),
                        r.layout.offset, dtype_py(r.dtype));
}

py::object arg_py(const Trace& g, const Node& n, const ArgDesc& d) {
  switch (d.kind) {
    case lower::Arg::kNone: return py::none();
    case lower::Arg::kTensor: return ref_py(g, n, d.t);
    case lower::Arg::kTensorList: {
      py::list l;
      for (const TensorRef& r : d.list) l.append(ref_py(g, n, r));
      return py::make_tuple("L", l);
    }
    case lower::Arg::kScalar: return py::make_tuple("S", torch::jit::toPyObject(d.value));
    case lower::Arg::kScalarList: return py::make_tuple("Q", torch::jit::toPyObject(d.value));
    default:
      if (d.value.isGenerator()) throw Decline{};
      return py::make_tuple("O", torch::jit::toPyObject(d.value));
  }
}

py::object node_py(const Trace& g, const Node& n) {
  const auto& schema = n.rec.op.schema();
  py::list args;
  for (const ArgDesc& d : n.rec.descs) args.append(arg_py(g, n, d));
  py::list outs;
  size_t j = 0;
  for (const OutSpec& s : n.entry->outs) {
    if (s.kind == OutSpec::kNone) {
      outs.append(py::make_tuple("x"));
    } else if (s.kind == OutSpec::kNew) {
      outs.append(py::make_tuple("n", n.outs.at(j++), dtype_py(s.dtype), ints(s.sizes),
                                 ints(s.strides)));
    } else {
      outs.append(py::make_tuple("w", n.outs.at(j++), s.input));
    }
  }
  py::list ins;
  for (const NodeInput& i : n.ins) ins.append(py::make_tuple(i.internal, i.id));
  return py::make_tuple(schema.name(), schema.overload_name(), args, outs, ins,
                        static_cast<int>(n.rec.precision));
}

py::object trace_py(const Trace& g, const std::vector<int>& outputs, int device) {
  py::list nodes;
  for (const Node& n : g.nodes) nodes.append(node_py(g, n));
  py::list params;
  // A parameter's buffer becomes a tensor only when the trace runs padded
  // (tensor(i)): wrapping every one at each miss would count its bytes twice.
  struct Held {
    std::shared_ptr<pjrt::Buffer> buf;
    c10::ScalarType dtype;
    int64_t numel;
  };
  auto bufs = std::make_shared<std::vector<Held>>();
  for (const TraceParam& p : g.params) {
    bufs->push_back({p.buffer, p.buffer ? lower::to_scalar_type(p.type.elem) : c10::ScalarType::Undefined,
                     p.type.numel()});
    if (p.buffer) {
      c10::ScalarType st = lower::to_scalar_type(p.type.elem);
      params.append(py::make_tuple("b", p.type.numel(), dtype_py(st), upload_shape_py(p.buffer)));
    } else if (p.host.kind == Input::kHost) {
      params.append(py::make_tuple("h", host_value(p)));
    } else if (p.host.kind == Input::kSlot) {
      params.append(py::make_tuple("e"));  // a storage with no contents yet (an out= target)
    } else {
      throw Decline{};  // an RNG state: random ops run per size
    }
  }
  py::list outs;
  for (int id : outputs) {
    const auto& s = g.slots[id].slot;
    outs.append(py::make_tuple(id, s->nbytes()));
  }
  py::cpp_function tensor([bufs, device](size_t i) {
    const Held& h = bufs->at(i);
    TORCH_CHECK(h.buf, "Defer & Fuse buckets: parameter ", i, " has no buffer");
    return wrap_buffer(h.buf, h.dtype, {h.numel}, device);
  });
  return py::make_tuple(nodes, params, outs, device, tensor);
}

// Runs the side trace's pending work and forgets it.
void end_side() {
  std::shared_ptr<Trace> side = std::move(t_side);
  t_side.reset();
  if (side) {
    std::lock_guard<std::mutex> lock(side->mu);
    side->flush_locked("deferred buckets");
  }
}

}  // namespace

void note_upload_shape(const std::shared_ptr<pjrt::Buffer>& buf, c10::IntArrayRef sizes) {
  if (sizes.size() < 2) return;  // a flat read of a 1-D input is that input
  UploadShapes& u = upload_shapes();
  std::lock_guard<std::mutex> g(u.mu);
  if (u.m.size() >= 4096)
    for (auto it = u.m.begin(); it != u.m.end();)
      it = it->second.first.expired() ? u.m.erase(it) : std::next(it);
  if (u.m.size() >= 8192) u.m.clear();
  u.m[buf.get()] = {buf, sizes.vec()};
}

const std::shared_ptr<Trace>* side_trace() { return t_side ? &t_side : nullptr; }

bool run_trace_bucketed(Trace& g, const std::vector<int>& outputs, int device) {
  if (t_side || g.in_backward || outputs.empty()) return false;
  if (g_hook == nullptr || !Py_IsInitialized()) return false;
  for (const auto& p : g.params)
    if (!p.buffer && p.host.kind == Input::kRng) return false;
  py::gil_scoped_acquire gil;
  t_side = std::make_shared<Trace>();
  std::vector<at::Tensor> results;
  try {
    py::object desc;
    try {
      desc = trace_py(g, outputs, device);
    } catch (const Decline&) {
      end_side();
      return false;
    }
    py::object r = (*g_hook)(desc);
    if (r.is_none()) {
      end_side();
      return false;
    }
    for (py::handle h : r) results.push_back(py::cast<at::Tensor>(h));
  } catch (py::error_already_set& e) {
    end_side();
    throw std::runtime_error(std::string("Defer & Fuse buckets: ") + e.what());
  } catch (...) {
    end_side();
    throw;
  }
  end_side();
  TORCH_CHECK(results.size() == outputs.size(), "Defer & Fuse buckets: the hook gave ",
              results.size(), " results for ", outputs.size(), " outputs");
  for (size_t j = 0; j < outputs.size(); ++j) {
    const at::Tensor& t = results[j];
    auto& s = g.slots[outputs[j]].slot;
    TORCH_CHECK(t.device().type() == kTpu && t.is_contiguous() && t.storage_offset() == 0 &&
                    t.storage().nbytes() == static_cast<size_t>(s->nbytes()) &&
                    lower::to_elem(t.scalar_type()) == s->raw_elem(),
                "Defer & Fuse buckets: result ", j, " does not match its storage");
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    auto& s = g.slots[outputs[j]].slot;
    s->fulfil(slot_ref(results[j])->buffer(), s->raw_elem());
  }
  return true;
}

void bind_deferred_buckets(py::module& m) {
  m.def("_set_deferred_bucket_hook", [](py::object fn) {
    py::object* old = g_hook;
    g_hook = fn.is_none() ? nullptr : new py::object(std::move(fn));
    delete old;
  });
}

}  // namespace tpu::aten

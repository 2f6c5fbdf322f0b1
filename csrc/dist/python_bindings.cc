// torch_tpu._C._distributed: the TpuBackend class, a c10d.Backend subclass that
// torch_tpu/distributed registers with torch.distributed as `tpu` / `tpu_dist`.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "dist/host_staged_transport.h"
#include "dist/in_place_reduce.h"
#include "dist/staging_pool.h"
#include "dist/tpu_backend.h"

namespace py = pybind11;

namespace tpu::dist {

void bind_distributed(py::module& m) {
  auto d = m.def_submodule("_distributed", "the tpu process-group backend");
  // c10d's Python types (Backend, ProcessGroupGloo) must be registered with
  // pybind before a subclass of them is declared.
  py::module::import("torch._C._distributed_c10d");
  py::class_<TpuBackend, c10d::Backend, c10::intrusive_ptr<TpuBackend>>(d, "TpuBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Backend>& gloo, int rank, int size,
                       std::chrono::milliseconds timeout) {
             TORCH_CHECK(gloo, "TpuBackend needs a Gloo backend for host staging");
             TORCH_CHECK(gloo->getRank() == rank && gloo->getSize() == size,
                         "TpuBackend: the Gloo backend is rank ", gloo->getRank(), " of ",
                         gloo->getSize(), ", expected rank ", rank, " of ", size);
             return c10::make_intrusive<TpuBackend>(
                 rank, size, make_host_staged_transport(gloo, "unnamed"), timeout);
           }),
           py::arg("host_backend"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           "A tpu backend whose collectives are staged through the host and run by "
           "`host_backend` (a ProcessGroupGloo on the same store).")
      .def_property_readonly("transport", &TpuBackend::transport_name);
  d.def("_staging_pool_stats", [] {
    StagingPoolStats s = staging_pool_stats();
    py::dict out;
    out["idle_bytes"] = s.idle_bytes;
    out["fresh_allocs"] = s.fresh_allocs;
    out["reuses"] = s.reuses;
    return out;
  }, "Host staging memory: bytes idle in the pool, blocks allocated, blocks reused.");
  d.def("_in_place_stats", [] {
    InPlaceStats s = in_place_stats();
    py::dict out;
    out["in_place"] = s.in_place;
    out["declined"] = s.declined;
    return out;
  }, "Allreduces of tpu tensors run by Gloo on the device buffer itself (in_place) and "
     "those that needed host staging instead (declined).");
}

}  // namespace tpu::dist

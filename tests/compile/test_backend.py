"""The `tpu` backend itself: registration, the device interface, one fused program
per graph through the shared program cache, recompiles on shape changes,
dynamic=True, Python scalars as runtime values, and the debug records."""
import os

import torch
import torch.nn as nn
from torch._dynamo.backends.registry import lookup_backend
from torch._dynamo.device_interface import get_interface_for_device
from torch._dynamo.utils import counters

import torch_tpu
from torch_tpu.dynamo.backend import tpu_backend
from torch_tpu.dynamo.device_interface import TpuDeviceInterface

TOL = dict(rtol=1e-4, atol=1e-5)


def test_backend_found_by_name_and_device_interface():
    assert lookup_backend("tpu") is tpu_backend
    torch.compile(lambda x: x + 1, backend="tpu")(torch.ones(2, device="tpu"))
    iface = get_interface_for_device("tpu")
    assert iface is TpuDeviceInterface
    assert iface.is_available() and iface.device_count() == torch.tpu.device_count()
    assert iface.current_device() == torch.tpu.current_device()
    iface.synchronize()
    assert iface.is_dtype_supported(torch.float64)


def test_entry_point_is_installed():
    from importlib.metadata import entry_points
    eps = entry_points(group="torch_dynamo_backends")
    assert "tpu" in eps.names
    assert eps["tpu"].value == "torch_tpu.dynamo.backend:tpu_backend"


def test_register_is_idempotent():
    import torch_tpu.dynamo
    assert torch_tpu.dynamo.register() is tpu_backend
    assert torch_tpu.dynamo.register() is tpu_backend
    assert lookup_backend("tpu") is tpu_backend


def test_each_graph_is_one_fused_program_from_the_shared_cache():
    def f(x, w):
        return torch.tanh(x @ w).sum(1).softmax(0) * 3

    x, w = torch.randn(4, 5), torch.randn(5, 6)
    before = torch_tpu._C._deferred_stats()
    with torch.no_grad():
        out = torch.compile(f, backend="tpu")(x.to("tpu"), w.to("tpu"))
        torch.testing.assert_close(out.cpu(), f(x, w), **TOL)
        after = torch_tpu._C._deferred_stats()
        assert after["graphs_run"] - before["graphs_run"] == 1
        assert after["materializations"].get("compiled graph", 0) == \
            before["materializations"].get("compiled graph", 0) + 1
        # A new Dynamo compile of the same function (here from a Defer & Fuse
        # thread) finds its program in the cache: keyed by structure, not by graph.
        with torch_tpu.execution_mode("defer_and_fuse"):
            torch._dynamo.reset()
            torch.compile(f, backend="tpu")(x.to("tpu"), w.to("tpu")).cpu()
    graphs = torch_tpu.debug.compiled_graphs()
    assert graphs[-1]["cache_hits"] == 1 and graphs[-1]["compiles"] == 0


def test_pending_eager_work_runs_before_the_graph():
    torch_tpu.set_execution_mode("defer_and_fuse")
    a = torch.randn(3, 3).to("tpu")
    b = a * 2 + 1  # pending
    out = torch.compile(lambda t: (t @ t).relu(), backend="tpu")(b)
    ref = a.cpu() * 2 + 1
    torch.testing.assert_close(out.cpu(), (ref @ ref).relu(), **TOL)


def test_shape_change_recompiles_through_guards():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    compiled = torch.compile(model.to("tpu"), backend="tpu")
    with torch.no_grad():
        for batch in (2, 3, 2):
            x = torch.randn(batch, 4)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), ref(x), **TOL)
    # A second shape fails the first graph's guards and compiles another (automatic
    # dynamic shapes may make it a symbolic one); the results above are right either way.
    assert len(torch_tpu.debug.compiled_graphs()) == 2


def test_dynamic_true_one_graph_for_all_batch_sizes():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    model = model.to("tpu")
    compiled = torch.compile(model, backend="tpu", dynamic=True)

    def f(m, x):
        return m(x).view(x.shape[0], -1).sum(1)

    frames = None
    for batch in (2, 3, 5, 3):
        x = torch.randn(batch, 4)
        out = f(compiled, x.to("tpu"))
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), f(ref, x).detach(), **TOL)
        if frames is None:
            frames = counters["stats"]["unique_graphs"]
    assert counters["stats"]["unique_graphs"] == frames  # no Dynamo recompiles
    graphs = torch_tpu.debug.compiled_graphs()
    assert [g["kind"] for g in graphs] == ["forward", "backward"]
    # One fused program per concrete shape; the repeated batch size reused its program.
    assert graphs[0]["compiles"] <= 3 and graphs[0]["cache_hits"] >= 1


def test_python_scalar_changes_do_not_recompile_programs():
    def f(x, scale):
        return (x * scale).exp()

    compiled = torch.compile(f, backend="tpu")
    x = torch.randn(4)
    for scale in (0.5, 1.5, 2.5, 3.5):
        torch.testing.assert_close(compiled(x.to("tpu"), scale).cpu(), f(x, scale), **TOL)
        if scale == 1.5:  # Dynamo turns the scalar into a graph input on its first change
            programs = torch_tpu.debug.metrics()["programs_compiled"]
            misses = torch_tpu._C._deferred_stats()["fused_cache_misses"]
    assert torch_tpu.debug.metrics()["programs_compiled"] == programs
    assert torch_tpu._C._deferred_stats()["fused_cache_misses"] == misses


def test_debug_records_and_stablehlo_dump(tmp_path):
    torch_tpu.debug.set_dump_dir(str(tmp_path))
    torch_tpu.debug.clear_program_cache()
    torch_tpu._C._clear_fused_cache()
    try:
        f = torch.compile(lambda x: torch.sin(x) * 7 + x.sum(), backend="tpu")
        f(torch.randn(9).to("tpu")).cpu()
        f(torch.randn(9).to("tpu")).cpu()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    (g,) = torch_tpu.debug.compiled_graphs()
    assert g["kind"] == "inference" and g["nodes"] >= 3
    assert g["calls"] == 2 and g["compiles"] == 1 and g["cache_hits"] == 1
    assert g["compile_seconds"] >= 0
    assert "aten.sin.default" in g["ops"]
    assert len(g["stablehlo_files"]) == 1 and g["stablehlo_files"][0].endswith(".mlir")
    text = torch_tpu.debug.compiled_graph_stablehlo(g["id"])
    assert "stablehlo.sine" in text and "func.func" in text
    fx_dump = [f for f in os.listdir(tmp_path) if f.startswith("compiled_graph_")]
    assert len(fx_dump) == 1

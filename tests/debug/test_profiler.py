"""torch.profiler sees tpu ops and the device programs they launch, with durations."""
import json

import torch
import torch_tpu
from torch.profiler import ProfilerActivity, profile


def test_chrome_trace_has_ops_and_programs(tmp_path):
    x = torch.randn(32, 32).to("tpu")
    (x @ x).relu().cpu()                 # compiled before profiling: launches only
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = torch.mm(x, x).relu()
        y.cpu()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert "aten::mm" in names and "aten::relu" in names
    programs = [e for e in events if e["name"].startswith("tpu::program ")]
    assert any("aten::mm" in e["name"] for e in programs), names
    assert all(e["dur"] > 0 for e in programs)
    # A program runs inside the op that launched it.
    mm = next(e for e in events if e["name"] == "aten::mm")
    prog = next(e for e in programs if "aten::mm" in e["name"])
    assert mm["ts"] <= prog["ts"] and prog["ts"] + prog["dur"] <= mm["ts"] + mm["dur"] + 1


def test_compiles_appear_in_the_profile():
    x = torch.randn(17, 29).to("tpu")
    was_enabled = torch_tpu.cache.enabled()
    torch_tpu.cache.clear(memory=True, disk=False)    # so that (x * 3) compiles again
    torch_tpu.cache.configure(enabled=False)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            (x * 3).cpu()
    finally:
        torch_tpu.cache.configure(enabled=was_enabled)
    names = [e.key for e in prof.key_averages()]
    assert any(n.startswith("tpu::compile ") for n in names), names
    assert any(n.startswith("tpu::program ") for n in names), names

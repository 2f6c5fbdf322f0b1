"""The smoke suite scripts/build_matrix.sh runs against each supported torch release:
the device API, a training step in each execution mode, an OpInfo sample, autocast,
DDP over 2 ranks and the persistent compile cache.

Not collected by the default run (its file name is not test_*.py: the default torch's
suite covers all of this in depth); run it by naming it:

    python -m pytest -q tests/compat/smoke_suite.py

It needs only pytest, numpy and expecttest (PyTorch's OpInfo database imports it).
"""
import json
import os
import shutil
import sys

import pytest
import torch

import torch_tpu
from conftest import TPU, assert_close_cpu, run_python

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "distributed"))
from _torchrun import ROOT, assert_ok, torchrun  # noqa: E402


def test_device_api():
    assert torch.tpu.is_available() and torch.tpu.device_count() >= 1
    assert torch.tpu.get_device_name(0)
    x = torch.arange(6.0).reshape(2, 3).to("tpu")
    assert x.device.type == "tpu" and x.is_tpu
    assert torch.tpu.memory_allocated() > 0
    torch.tpu.synchronize()
    assert_close_cpu(x * 2 + 1, torch.arange(6.0).reshape(2, 3) * 2 + 1)


def _train_step(model, device, compiled=False):
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step_model = torch.compile(model, backend="tpu") if compiled else model
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(step_model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse", "compiled"])
def test_training_step(mode):
    ref_losses, ref_params = _train_step(_model(), "cpu")
    if mode == "compiled":
        losses, params = _train_step(_model(), "tpu", compiled=True)
    else:
        with torch_tpu.execution_mode(mode):
            losses, params = _train_step(_model(), "tpu")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-5)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_name", ["add", "softmax", "matmul", "index_select"])
def test_opinfo_sample(op_name):
    from torch.testing._internal.common_methods_invocations import op_db
    op = next(o for o in op_db if o.name == op_name and o.variant_test_name == "")
    checked = 0
    for sample in op.sample_inputs("cpu", torch.float32):
        expected = op(sample.input, *sample.args, **sample.kwargs)
        moved = sample.transform(lambda t: t.to("tpu") if isinstance(t, torch.Tensor) else t)
        actual = op(moved.input, *moved.args, **moved.kwargs)
        assert_close_cpu(actual, expected, rtol=1e-4, atol=1e-5)
        checked += 1
    assert checked > 0


def test_autocast():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = a.to(TPU) @ b.to(TPU)
        s = torch.softmax(out, dim=-1)  # autocast's fp32 list
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = a @ b
    assert out.dtype == torch.bfloat16 and s.dtype == torch.float32
    assert_close_cpu(out, ref)


def test_ddp_two_ranks(tmp_path):
    # The example from a copy outside the checkout, with the checkout off PYTHONPATH:
    # the ranks import the installed torch_tpu (the wheel under test), not the
    # checkout's in-place build (the example puts its own parent's parent on sys.path).
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    script = str(tmp_path / "examples" / "distributed" / "ddp_mingpt.py")
    rc, out = torchrun(script, nproc=2, mode="defer_and_fuse", env={"PYTHONPATH": ""},
                       args=["--width", "32", "--depth", "1", "--context", "16", "--check",
                             "--check-steps", "2", "--mode", "defer_and_fuse"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK"])


CACHE_CHILD = """
import json, torch, torch_tpu
x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu")
print("RESULT " + json.dumps({"value": ((x + 1) * x).sum().item(),
                              "stats": torch_tpu.cache.stats()}))
"""


def test_compile_cache_second_process_compiles_nothing(tmp_path):
    runs = []
    for _ in range(2):
        r = run_python(CACHE_CHILD, env={"TORCH_TPU_CACHE_DIR": str(tmp_path)})
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.split("RESULT ", 1)[1]))
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert runs[0]["value"] == runs[1]["value"] == ((x + 1) * x).sum().item()
    assert runs[0]["stats"]["disk_writes"] > 0
    assert runs[1]["stats"]["disk_hits"] > 0 and runs[1]["stats"]["disk_misses"] == 0

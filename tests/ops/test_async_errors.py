"""Asynchronous run-time errors: a program that fails on the device after its launch
returned (not at compile time) is reported at the next sync point -- .item(), .cpu(),
torch.tpu.synchronize(), an event wait -- as a RuntimeError naming the op and, in
Defer & Fuse, the Python line that recorded it; the device stays usable.

The CPU plugin has no device faults, so the failure is injected where a real one
arrives: torch_tpu._C._debug_fail_execute(name) makes every launch whose op name (or
fused graph's op list) contains `name` lose its outputs (PJRT_Buffer_Delete: reading
them fails) and be tracked with a completion event that carries an error; the launch
itself returns normally. Everything after that -- the stored error, raising it at the
sync point with the op and line, later ops that read the lost values -- is the real
path. Runs in Strict Eager and Defer & Fuse (conftest), and compiled below."""
import contextlib

import pytest
import torch

import torch_tpu
from conftest import run_python


@contextlib.contextmanager
def failing(op):
    torch_tpu._C._debug_fail_execute(op)
    try:
        yield
        # Defer & Fuse launches the recorded graph at a flush: run it here, while
        # the fault is armed (a flush waits for nothing, so nothing raises yet).
        torch_tpu._C._flush("test")
    finally:
        torch_tpu._C._debug_fail_execute("")


def _assert_usable():
    a = torch.arange(6.0, device="tpu")
    assert (a * 3 + 1).sum().item() == 51.0


SYNC_POINTS = {
    "item": lambda y: y.sum().item(),
    "cpu": lambda y: y.cpu(),
    "synchronize": lambda y: torch.tpu.synchronize(),
    "event": lambda y: (lambda e: (e.record(), e.synchronize()))(torch.tpu.Event()),
    "stream": lambda y: torch.tpu.current_stream().synchronize(),
}


@pytest.mark.parametrize("sync", sorted(SYNC_POINTS))
def test_runtime_failure_raises_at_sync_point(sync):
    x = torch.arange(12.0, device="tpu").reshape(3, 4)
    before = x.cpu()
    with failing("aten::mul"):
        y = x.mul(2.0)  # returns at once: the failure happens on the device
    with pytest.raises(RuntimeError, match=r"aten::mul[\s\S]*failed on the device[\s\S]*"
                                           r"TORCH_TPU_DEBUG_FAIL_EXECUTE") as info:
        SYNC_POINTS[sync](y)
    if torch_tpu.get_execution_mode() == "defer_and_fuse":
        # The fused graph names the Python line that recorded the failed op.
        assert "test_async_errors.py" in str(info.value) and "aten::mul" in str(info.value), info.value
    # Reported once; the inputs are intact and the device runs new work.
    torch.tpu.synchronize()
    assert torch.equal(x.cpu(), before)
    _assert_usable()


def test_lost_value_reads_as_an_error_not_numbers():
    x = torch.ones(4, device="tpu")
    with failing("aten::mul"):
        y = x * 5
    with pytest.raises(RuntimeError, match="aten::mul"):
        y.cpu()
    # A second read of the value that was never computed still raises, clearly.
    with pytest.raises(RuntimeError, match="never computed|aten::mul"):
        y.cpu()
    _assert_usable()


def test_work_reading_a_lost_value_reports_the_first_failure():
    x = torch.ones(4, device="tpu")
    with failing("aten::mul"):
        y = x * 2
    # Strict Eager reports it when the add is launched (its input was never
    # computed), Defer & Fuse at the read; either way it names the mul.
    with pytest.raises(RuntimeError, match=r"aten::mul[\s\S]*failed on the device"):
        (y + 1).cpu()
    _assert_usable()


def test_only_the_first_failure_raises_then_clean():
    x = torch.ones(4, device="tpu")
    with failing("aten::mul"):
        a = x * 2
        b = x * 3
    with pytest.raises(RuntimeError, match="aten::mul"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # nothing left to report
    _assert_usable()
    del a, b


def test_failure_is_not_reported_before_the_sync_point():
    x = torch.ones(4, device="tpu")
    with failing("aten::mul"):
        y = x * 2
    other = x + 1   # unrelated work is queued and runs
    del y
    with pytest.raises(RuntimeError, match="aten::mul"):
        other.sum().item()
    _assert_usable()


@pytest.mark.strict_only
def test_compiled_graph_runtime_failure():
    f = torch.compile(lambda t: (t * 2).sin() + 1, backend="tpu")
    x = torch.randn(8, device="tpu")
    ref = ((x.cpu() * 2).sin() + 1)
    torch.testing.assert_close(f(x).cpu(), ref)
    with failing("aten::sin"):
        y = f(x)
    with pytest.raises(RuntimeError, match=r"failed on the device[\s\S]*aten::sin"):
        y.cpu()
    torch.testing.assert_close(f(x).cpu(), ref)  # the compiled graph still works
    _assert_usable()


@pytest.mark.strict_only
def test_env_var_injection_in_a_fresh_process():
    r = run_python("""
        import torch, torch_tpu
        x = torch.ones(3, device="tpu")
        y = x.neg()
        try:
            y.cpu()
        except RuntimeError as e:
            print("raised:", "aten::neg" in str(e))
        torch_tpu._C._debug_fail_execute("")
        print((x + 1).sum().item())
    """, env={"TORCH_TPU_DEBUG_FAIL_EXECUTE": "aten::neg"})
    assert r.returncode == 0, r.stderr
    assert "raised: True" in r.stdout and "6.0" in r.stdout, r.stdout

"""Device-side checks, continued: how a fused graph's writes are gated on its checks
(a write is gated where it is written, on the checks declared so far, and again at the
output when a later check follows), and switching the checks at run time (the program
caches keep programs with and without checks apart: nothing recompiles)."""
import pytest
import torch
import torch_tpu

C = torch_tpu._C


def test_fused_writes_after_the_first_check_are_undone(tpu_execution_mode):
    if tpu_execution_mode != "defer_and_fuse":
        return  # Strict Eager: each op is its own program (test_device_checks.py)
    t = torch.arange(4.0, device="tpu")
    a = torch.ones(4, device="tpu")
    b = torch.zeros(4, device="tpu")
    torch.tpu.synchronize()
    a.add_(1)                                               # before the first check: kept
    v = t.index_select(0, torch.tensor([0, 9], device="tpu"))  # fails
    a.mul_(3)                                               # gated where written
    b.copy_(a * 2 + v.sum())                                # reads the gated value
    with pytest.raises(IndexError, match="index out of range"):
        torch.tpu.synchronize()
    assert a.cpu().tolist() == [2.0] * 4
    assert b.cpu().tolist() == [0.0] * 4


def test_fused_write_between_a_passing_and_a_failing_check_is_undone(tpu_execution_mode):
    if tpu_execution_mode != "defer_and_fuse":
        return
    t = torch.arange(4.0, device="tpu")
    a = torch.ones(4, device="tpu")
    torch.tpu.synchronize()
    good = t.index_select(0, torch.tensor([1, 3], device="tpu"))   # passes
    a.add_(good.sum())                                 # gated on the first check only
    bad = t.gather(0, torch.tensor([-9], device="tpu"))            # fails later
    a.add_(bad.sum())
    with pytest.raises(RuntimeError, match="out of bounds"):
        a.cpu()
    assert a.cpu().tolist() == [1.0] * 4
    # In range, the same graph writes what the CPU computes.
    a2 = torch.ones(4)
    a_tpu = a2.to("tpu")
    g = t.index_select(0, torch.tensor([1, 3], device="tpu"))
    a_tpu.add_(g.sum())
    a_tpu.add_(t.gather(0, torch.tensor([2], device="tpu")).sum())
    assert a_tpu.cpu().tolist() == [1.0 + 4.0 + 2.0] * 4


def test_switching_checks_recompiles_nothing():
    x = torch.arange(6.0, device="tpu")
    good = torch.tensor([1, 5], device="tpu")
    bad = torch.tensor([1, 9], device="tpu")
    f = lambda j: x.index_select(0, j).mul(2).sum().item()  # noqa: E731
    try:
        for on in (True, False):
            C._set_device_checks(on)
            assert f(good) == 12.0
        compiled = C._metrics()["programs_compiled"]
        for on in (True, False, True, False):
            C._set_device_checks(on)
            assert C._device_checks_enabled() == on
            assert f(good) == 12.0
        assert C._metrics()["programs_compiled"] == compiled
        C._set_device_checks(False)
        f(bad)  # XLA clamps; no check, no error
        C._set_device_checks(True)
        with pytest.raises(IndexError, match="index out of range"):
            f(bad)
    finally:
        C._set_device_checks(True)
    assert f(good) == 12.0

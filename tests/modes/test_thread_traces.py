"""Defer & Fuse keeps one pending trace per thread: threads record without
waiting for each other, and a storage pending in one thread's trace that another
thread reads runs the owner's trace first. Values are small integers, so the
results are exact."""
import threading

import torch

import torch_tpu
from conftest import HANG_SECONDS
from torch_tpu import _C


def _in_thread(fn):
    errors = []

    def body():
        try:
            with torch_tpu.execution_mode("defer_and_fuse"):
                fn()
        except BaseException as e:  # noqa: BLE001  (reported by the caller)
            errors.append(e)
    t = threading.Thread(target=body)
    t.start()
    return t, errors


def test_two_threads_own_traces_and_a_shared_tensor(tpu_execution_mode):
    a = torch.arange(12.0).reshape(3, 4)
    shared = a.to("tpu")
    written, read_done = threading.Event(), threading.Event()
    seen = {}

    def writer():
        own = shared * 3           # pending in this thread's trace
        shared.add_(1)             # the shared storage is now pending here too
        seen["writer_pending"] = _C._pending_nodes()
        written.set()
        assert read_done.wait(HANG_SECONDS)
        # The reader ran this trace; what it recorded afterwards is its own.
        seen["writer_after_read"] = _C._pending_nodes()
        own.mul_(2)
        seen["own"] = own.cpu()

    def reader():
        assert written.wait(HANG_SECONDS)
        seen["reader_pending_before"] = _C._pending_nodes()
        r = (shared @ shared.T) - 1  # reads the writer's pending value
        seen["reader_pending"] = _C._pending_nodes()
        seen["r"] = r.cpu()
        seen["shared"] = shared.cpu()
        read_done.set()

    before = _C._deferred_stats()["materializations"].get("read by another thread", 0)
    tw, ew = _in_thread(writer)
    tr, er = _in_thread(reader)
    tw.join(HANG_SECONDS)
    tr.join(HANG_SECONDS)
    assert not tw.is_alive() and not tr.is_alive(), "a thread hung"
    assert not ew and not er, ew + er
    assert seen["writer_pending"] == 2 and seen["reader_pending_before"] == 0
    assert seen["reader_pending"] >= 1  # the reader's ops are in its own trace
    assert seen["writer_after_read"] == 0
    b = a + 1
    assert torch.equal(seen["shared"], b)
    assert torch.equal(seen["r"], b @ b.T - 1)
    assert torch.equal(seen["own"], a * 6)
    assert torch.equal(shared.cpu(), b)
    after = _C._deferred_stats()["materializations"].get("read by another thread", 0)
    assert after == before + 1


def test_a_value_pending_in_an_ended_thread_is_readable():
    out = {}

    def work():
        out["t"] = torch.arange(6.0, device="tpu") * 2 + 1
    t, errors = _in_thread(work)
    t.join(HANG_SECONDS)
    assert not errors, errors
    assert torch.equal(out["t"].cpu(), torch.arange(6.0) * 2 + 1)


def test_threads_record_in_parallel_without_sharing_a_trace():
    # Each thread's pending count is its own: another thread's ops never appear.
    counts, errors = {}, []
    bar = threading.Barrier(4)

    def work(tid):
        try:
            with torch_tpu.execution_mode("defer_and_fuse"):
                bar.wait(HANG_SECONDS)
                x = torch.full((4,), float(tid), device="tpu")
                for _ in range(5):
                    x = x + 1
                bar.wait(HANG_SECONDS)
                counts[tid] = _C._pending_nodes()
                bar.wait(HANG_SECONDS)
                assert torch.equal(x.cpu(), torch.full((4,), tid + 5.0))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            bar.abort()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join(HANG_SECONDS) for t in ts]
    assert not errors, errors
    assert len(set(counts.values())) == 1 and counts[0] >= 5, counts


def test_backward_records_into_the_callers_trace():
    # autograd runs the backward on its device thread; it records into the trace of
    # the thread that called backward(), so forward, backward and the optimizer step
    # are one fused program (no saved activation is materialised between them).
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    model.load_state_dict(ref.state_dict())
    model = model.to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x, y = torch.randn(4, 6), torch.randn(4, 3)
    # The process-wide mode: autograd's device thread does not see a thread override.
    torch_tpu.set_execution_mode("defer_and_fuse")
    for _ in range(3):
        before = _C._deferred_stats()["graphs_run"]
        loss = torch.nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        assert _C._pending_nodes() > 0  # the backward is pending in this thread's trace
        opt.step()  # the step boundary runs the trace
        assert _C._deferred_stats()["graphs_run"] == before + 1
        ref_loss = torch.nn.functional.mse_loss(ref(x), y)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss.backward()
        ref_opt.step()
        torch.testing.assert_close(loss.item(), ref_loss.item(), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)

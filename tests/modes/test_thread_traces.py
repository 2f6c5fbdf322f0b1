"""Defer & Fuse keeps one pending trace per thread: threads record without
waiting for each other, and a storage pending in one thread's trace that another
thread reads runs the owner's trace first. Values are small integers, so the
results are exact."""
import threading

import torch

import torch_tpu
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
        assert read_done.wait(60)
        # The reader ran this trace; what it recorded afterwards is its own.
        seen["writer_after_read"] = _C._pending_nodes()
        own.mul_(2)
        seen["own"] = own.cpu()

    def reader():
        assert written.wait(60)
        seen["reader_pending_before"] = _C._pending_nodes()
        r = (shared @ shared.T) - 1  # reads the writer's pending value
        seen["reader_pending"] = _C._pending_nodes()
        seen["r"] = r.cpu()
        seen["shared"] = shared.cpu()
        read_done.set()

    before = _C._deferred_stats()["materializations"].get("read by another thread", 0)
    tw, ew = _in_thread(writer)
    tr, er = _in_thread(reader)
    tw.join(120)
    tr.join(120)
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
    t.join(60)
    assert not errors, errors
    assert torch.equal(out["t"].cpu(), torch.arange(6.0) * 2 + 1)


def test_threads_record_in_parallel_without_sharing_a_trace():
    # Each thread's pending count is its own: another thread's ops never appear.
    counts, errors = {}, []
    bar = threading.Barrier(4)

    def work(tid):
        try:
            with torch_tpu.execution_mode("defer_and_fuse"):
                bar.wait(60)
                x = torch.full((4,), float(tid), device="tpu")
                for _ in range(5):
                    x = x + 1
                bar.wait(60)
                counts[tid] = _C._pending_nodes()
                bar.wait(60)
                assert torch.equal(x.cpu(), torch.full((4,), tid + 5.0))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            bar.abort()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    assert not errors, errors
    assert len(set(counts.values())) == 1 and counts[0] >= 5, counts

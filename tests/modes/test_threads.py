"""Many Python threads using the tpu device at once (PyTorch releases the GIL inside ops).

Every thread runs the same op signatures at the same moment (a barrier before each
step, and shapes no earlier step used), so they meet on the first compile of a shared
program-cache entry, the launch of its executable and the hand-off of output buffers:
the paths a data race corrupted ("Executable expected parameter 0 of size
139758458700575 ..."). Values are small integers, so results are exact on any backend.
"""
import itertools
import threading

import pytest
import torch

from conftest import HANG_SECONDS, run_python

THREADS = 8
_fresh = itertools.count(5)  # shape offsets no earlier test in this process used


def _run_threads(fn, steps):
    errors = []
    barrier = threading.Barrier(THREADS)

    def worker(tid):
        try:
            for step in range(steps):
                barrier.wait(timeout=HANG_SECONDS)
                fn(tid, step)
        except threading.BrokenBarrierError:
            pass
        except BaseException as e:  # noqa: BLE001  (reported below, with the thread)
            errors.append(f"thread {tid}: {type(e).__name__}: {e}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=HANG_SECONDS)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, "\n".join(errors)


def _ints(gen, *shape):
    return torch.randint(-3, 4, shape, generator=gen).float()


def test_threads_forward_and_backward_exact(tpu_execution_mode):
    base = next(_fresh) * 7

    def step(tid, i):
        g = torch.Generator().manual_seed(1000 * tid + i)
        n, k = 2 + (base + i) % 11, 3 + (base + i) // 11 % 5
        x, w, c = _ints(g, n, k), _ints(g, k, 4), _ints(g, n, 4)
        wt = w.to("tpu").requires_grad_()
        out = ((x.to("tpu") @ wt).relu() * c.to("tpu")).sum(1)
        out.sum().backward()
        wc = w.clone().requires_grad_()
        ref = ((x @ wc).relu() * c).sum(1)
        ref.sum().backward()
        assert torch.equal(out.detach().cpu(), ref.detach()), (tid, i)
        assert torch.equal(wt.grad.cpu(), wc.grad), (tid, i)
        assert out.sum().item() == ref.sum().item()

    _run_threads(step, steps=6)


def test_threads_small_ops_loop(tpu_execution_mode):
    base = next(_fresh) * 13

    def step(tid, i):
        x = torch.full((8, 3 + (base + i) % 29), float(tid), device="tpu")
        y = (x * 2 + 1).sum()
        z = x.mul(3).amax(1)
        assert y.item() == x.numel() * (2 * tid + 1)
        assert z.cpu().tolist() == [3.0 * tid] * 8

    _run_threads(step, steps=10)


def test_threads_host_to_device_copies_and_shared_reads(tpu_execution_mode):
    # As transformers' from_pretrained loads weights on 4 threads: many copies in, a
    # shared tensor read by everyone, in-place writes to each thread's own tensors.
    shared_cpu = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    shared = shared_cpu.to("tpu")
    base = next(_fresh)

    def step(tid, i):
        g = torch.Generator().manual_seed(tid * 100 + i)
        cpu = [_ints(g, 3 + (base + i + j) % 7, 5) for j in range(4)]
        dev = [t.to("tpu") for t in cpu]
        own = torch.zeros(8, 8, device="tpu")
        own.add_(shared).mul_(tid)
        for t, d in zip(cpu, dev):
            d.add_(1)
            assert torch.equal(d.cpu(), t + 1)
        assert torch.equal(own.cpu(), shared_cpu * tid)
        assert torch.equal((shared @ shared).cpu(), shared_cpu @ shared_cpu)

    _run_threads(step, steps=10)


@pytest.mark.slow
@pytest.mark.strict_only
def test_threads_fresh_process_no_disk_cache():
    # Compiles take longest with no persistent cache: the widest race window. A fresh
    # process, several rounds, both eager modes.
    r = run_python("""
        import threading, torch, torch_tpu
        for mode in ("strict_eager", "defer_and_fuse"):
            torch_tpu.set_execution_mode(mode)
            errs, bar = [], threading.Barrier(8)
            def work(tid):
                try:
                    for i in range(25):
                        bar.wait(timeout=300)
                        x = torch.full((16, 3 + i), float(tid), device="tpu", requires_grad=True)
                        y = (x * 2 + 1).sum()
                        y.backward()
                        assert y.item() == 16 * (3 + i) * (2 * tid + 1), (mode, tid, i)
                        assert torch.equal(x.grad.cpu(), torch.full((16, 3 + i), 2.0))
                except threading.BrokenBarrierError:
                    pass
                except Exception as e:
                    errs.append(repr(e)); bar.abort()
            ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            [t.start() for t in ts]; [t.join() for t in ts]
            assert not errs, errs
        print("ok")
        """, env={"TORCH_TPU_CACHE": "0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr

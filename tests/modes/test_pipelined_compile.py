"""Strict Eager's pipelined compilation (csrc/engine/compile_pool.h, op_kernel.cc): a
cold op's single-op program compiles on a background thread while the op is
recorded, and the recorded ops run in order, each as its own program, at the next
sync point. It must give the same results and compile the same programs (same cache
keys) as compiling each op at its call, from any number of threads."""
import os
import threading

import pytest
import torch
import torch_tpu
from conftest import run_python

pytestmark = pytest.mark.strict_only  # Strict Eager's own feature


def _fresh():
    torch_tpu.debug.clear_program_cache()
    torch_tpu._C._clear_fused_cache()


def _pipelined_graphs():
    return torch_tpu._C._deferred_stats()["graphs_pipelined"]


def _train(device, steps=2):
    """A small MLP: forward, backward, AdamW; the losses and the final weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 5)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 12, generator=g).to(device)
    y = torch.randint(0, 5, (16,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_cold_step_is_pipelined_and_equals_compiling_at_each_call():
    _fresh()
    p0 = _pipelined_graphs()
    with torch_tpu.debug.pipelined_compile(True):
        on_losses, on_params = _train("tpu")
    assert _pipelined_graphs() > p0  # the cold step went through the pipeline
    _fresh()
    p1 = _pipelined_graphs()
    with torch_tpu.debug.pipelined_compile(False):
        off_losses, off_params = _train("tpu")
    assert _pipelined_graphs() == p1
    # The same single-op programs in the same order: bit for bit the same.
    assert on_losses == off_losses
    for a, b in zip(on_params, off_params):
        assert torch.equal(a, b)
    cpu_losses, cpu_params = _train("cpu")
    torch.testing.assert_close(torch.tensor(on_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-5)
    for a, b in zip(on_params, cpu_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_warm_ops_are_not_deferred():
    """Once every program is compiled, Strict Eager runs each op at its call again."""
    x = torch.randn(8, 8).to("tpu")
    with torch_tpu.debug.pipelined_compile(True):
        (x * 3 + 1).cpu()  # compiles (pipelined)
        p0 = _pipelined_graphs()
        y = x * 3 + 1
        assert torch_tpu._C._pending_nodes() == 0
        y.cpu()
        assert _pipelined_graphs() == p0


def test_threads_pipeline_at_once():
    """Several Python threads, each with cold ops of its own shapes: every result right."""
    _fresh()
    errors, results = [], {}

    def work(i):
        try:
            a = torch.randn(5 + i, 7, generator=torch.Generator().manual_seed(i))
            b = torch.randn(7, 3 + i, generator=torch.Generator().manual_seed(100 + i))
            ta, tb = a.to("tpu"), b.to("tpu")
            out = ((ta @ tb).relu() * 2 - 1).softmax(-1).sum(0)
            results[i] = (out.cpu(), ((a @ b).relu() * 2 - 1).softmax(-1).sum(0))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(repr(e))

    with torch_tpu.debug.pipelined_compile(True):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for got, want in results.values():
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert len(results) == 6


_KEYS_CHILD = """
import os, torch, torch_tpu
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 5)).to("tpu")
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x, y = torch.randn(16, 12).to("tpu"), torch.randint(0, 5, (16,)).to("tpu")
for _ in range(2):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    print("LOSS", repr(loss.item()))
print("PIPELINED", torch_tpu._C._deferred_stats()["graphs_pipelined"])
"""


def test_same_programs_and_cache_keys_in_a_fresh_process(tmp_path):
    """Empty caches, with and without the pipeline (4 compile threads): the same
    programs (the dump names each by its cache key) and the same losses."""
    runs = {}
    for flag in ("1", "0"):
        dump, cache = tmp_path / f"dump{flag}", tmp_path / f"cache{flag}"
        p = run_python(_KEYS_CHILD, env={"TORCH_TPU_PIPELINED_COMPILE": flag,
                                         "TORCH_TPU_COMPILE_THREADS": "4",
                                         "TORCH_TPU_DUMP_DIR": str(dump),
                                         "TORCH_TPU_CACHE_DIR": str(cache)}, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        lines = p.stdout.splitlines()
        runs[flag] = dict(losses=[ln for ln in lines if ln.startswith("LOSS")],
                          pipelined=int(next(ln for ln in lines if ln.startswith("PIPELINED")).split()[1]),
                          programs=sorted(f for f in os.listdir(dump) if f.endswith(".mlir")),
                          cached=sorted(os.listdir(cache)))
    assert runs["1"]["pipelined"] > 0 and runs["0"]["pipelined"] == 0
    assert runs["1"]["losses"] == runs["0"]["losses"]
    assert runs["1"]["programs"] == runs["0"]["programs"] and runs["1"]["programs"]
    assert runs["1"]["cached"] == runs["0"]["cached"]


def test_a_failed_compile_is_raised_at_the_sync_point_and_the_process_goes_on():
    p = run_python("""
        import torch, torch_tpu
        x = torch.randn(4).to("tpu")
        y = x.sin() + 1
        try:
            y.cpu()
        except RuntimeError as e:
            print("RAISED", "sin" in str(e), "injected" in str(e))
        print("AFTER", (x * 2).cpu().tolist() == (x.cpu() * 2).tolist())
    """, env={"TORCH_TPU_DEBUG_FAIL_COMPILE": "stablehlo.sine", "TORCH_TPU_CACHE": "0",
              "TORCH_TPU_PIPELINED_COMPILE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "RAISED True True" in p.stdout, p.stdout + p.stderr[-2000:]
    assert "AFTER True" in p.stdout


def test_launch_blocking_compiles_at_the_call():
    """An error must point at its op: launch blocking turns the pipeline off."""
    _fresh()
    p0 = _pipelined_graphs()
    prev = torch_tpu._C._launch_blocking()
    torch_tpu._C._set_launch_blocking(True)
    try:
        with torch_tpu.debug.pipelined_compile(True):
            (torch.randn(3, 3).to("tpu").cos() * 5).cpu()
    finally:
        torch_tpu._C._set_launch_blocking(prev)
    assert _pipelined_graphs() == p0


_SAME_OPS_CHILD = """
import sys, threading, torch, torch_tpu
n = int(sys.argv[1])
torch_tpu.debug.pipelined_compile(True).__enter__()
g = torch.Generator().manual_seed(0)
a, b = torch.randn(6, 9, generator=g), torch.randn(9, 4, generator=g)
out, errors, start = [None] * n, [], threading.Barrier(n)

def work(i):
    try:
        start.wait()  # every thread reaches the cold ops together
        ta, tb = a.to("tpu"), b.to("tpu")
        out[i] = ((ta @ tb).tanh() * 3 - ta.sum()).log_softmax(-1).cpu()
    except Exception as e:
        errors.append(repr(e))

threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
assert not errors, errors
want = ((a @ b).tanh() * 3 - a.sum()).log_softmax(-1)
for o in out:
    torch.testing.assert_close(o, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(o, out[0])  # one program per op: bit for bit the same
print("COMPILED", torch_tpu.debug.metrics()["programs_compiled"])
"""


def test_threads_running_the_same_cold_ops_compile_each_program_once():
    """Six threads reach the same cold ops at once (one compile pool, the pipeline on):
    as many programs compile as for one thread, and every thread's results are the
    same bits (the Entry's lock: one compile per cache key, wherever it starts)."""
    counts = {}
    for n in (1, 6):
        p = run_python(_SAME_OPS_CHILD.replace("sys.argv[1]", str(n)),
                       env={"TORCH_TPU_CACHE": "0", "TORCH_TPU_COMPILE_THREADS": "2"}, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        counts[n] = int(next(ln for ln in p.stdout.splitlines() if ln.startswith("COMPILED")).split()[1])
    assert counts[1] > 0 and counts[6] == counts[1], counts


def test_exit_with_compiles_still_queued_is_clean():
    """A process that exits while its pipelined compiles are queued or running: the
    queued ones are dropped and the running one ends before teardown (before this,
    a compile met LLVM's destroyed statics, or a job's closure released its Python
    references after the interpreter had gone: a crash or std::terminate at exit).
    A thread-local Python object goes with each job (the caller's ThreadLocalState)."""
    body = """
import torch, torch_tpu
torch._C._stash_obj_in_tls("torch_tpu_test", object())
xs = [torch.randn(8 + i, 16).to("tpu") for i in range(40)]
ys = [(x * 1.5).exp().sum(0) for x in xs]  # 120 cold programs, none waited for
print("recorded")
"""
    env = {"TORCH_TPU_CACHE": "0", "TORCH_TPU_COMPILE_THREADS": "1",
           "TORCH_TPU_PIPELINED_COMPILE": "1"}
    for _ in range(3):  # without the fix, 5 of 6 such runs crashed
        r = run_python(body, env=env, timeout=300)
        assert r.returncode == 0 and "recorded" in r.stdout, (r.returncode, r.stdout + r.stderr)
        assert "terminate" not in r.stderr and "LLVM ERROR" not in r.stderr, r.stderr

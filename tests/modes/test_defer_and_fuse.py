"""Defer & Fuse: recording, materialisation, aliasing across graphs, memory,
steady-state training without recompiles, and the mode-selection API."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_tpu
from conftest import HANG_SECONDS, assert_close_cpu, run_python

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402

pytestmark = pytest.mark.strict_only  # each test picks its modes itself


def stats():
    return torch_tpu._C._deferred_stats()


def compiled():
    m = torch_tpu.debug.metrics()
    return m["programs_compiled"] + m.get("disk_hits", 0)


def test_mode_api_and_context_manager():
    assert torch_tpu.get_execution_mode() == "strict_eager"
    torch_tpu.set_execution_mode("defer_and_fuse")
    assert torch_tpu.get_execution_mode() == "defer_and_fuse"
    with torch_tpu.execution_mode("strict_eager"):
        assert torch_tpu.get_execution_mode() == "strict_eager"
    assert torch_tpu.get_execution_mode() == "defer_and_fuse"
    torch_tpu.set_execution_mode("strict_eager")
    with torch_tpu.execution_mode("defer_and_fuse"):
        x = torch.ones(4, device="tpu") * 3
        assert torch_tpu._C._pending_nodes() >= 1
    assert torch_tpu._C._pending_nodes() == 0  # leaving the block ran it
    assert x.sum().item() == 12
    with pytest.raises(ValueError, match="strict_eager"):
        torch_tpu.set_execution_mode("sometimes")


@pytest.mark.parametrize("env", [{"TORCH_TPU_EXECUTION_MODE": "defer_and_fuse"},
                                 {"TORCH_TPU_DEFER_AND_FUSE": "1"},
                                 {"TORCH_TPU_DEFER_AND_FUSE": "1", "TORCH_TPU_LAUNCH_BLOCKING": "1"}])
def test_mode_from_environment(env):
    r = run_python("""
        import torch, torch_tpu
        print(torch_tpu.get_execution_mode())
        x = torch.ones(3, device="tpu") + 1
        print(torch_tpu._C._pending_nodes(), x.sum().item())
    """, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    mode, pending, total = r.stdout.split("\n")[0], *r.stdout.split("\n")[1].split()
    assert float(total) == 6.0
    if "TORCH_TPU_LAUNCH_BLOCKING" in env:  # launch blocking wins
        assert (mode, int(pending)) == ("strict_eager", 0)
    else:
        assert mode == "defer_and_fuse" and int(pending) >= 2  # fill_ and add wait


def test_ops_wait_for_a_read_and_run_as_one_program():
    torch_tpu.set_execution_mode("defer_and_fuse")
    before = stats()
    a = torch.randn(8, 8)
    x = a.to("tpu")
    y = ((x + 1) * 2).exp().sum(dim=1)
    assert torch_tpu._C._pending_nodes() == 4
    assert stats()["graphs_run"] == before["graphs_run"]
    assert_close_cpu(y, ((a + 1) * 2).exp().sum(dim=1), rtol=1e-5, atol=1e-4)
    after = stats()
    assert after["graphs_run"] == before["graphs_run"] + 1
    assert after["materializations"].get("host read", 0) == \
        before["materializations"].get("host read", 0) + 1


def test_recording_time_is_tallied_per_op_and_reset():
    # benchmarks/defer_breakdown.py reads these per-op tallies (kept on each op's
    # OpInfo as atomics, summed over threads).
    import threading
    x = torch.ones(4, device="tpu")
    with torch_tpu.execution_mode("defer_and_fuse"):
        torch_tpu._C._recording_by_op(reset=True)
        y = x * 2
        y = y * 3

        def other():
            with torch_tpu.execution_mode("defer_and_fuse"):
                (x * 5).cpu()

        t = threading.Thread(target=other)
        t.start()
        t.join()
        by = torch_tpu._C._recording_by_op(reset=True)
        assert by["aten::mul.Tensor"][0] == 3 and by["aten::mul.Tensor"][1] > 0
        assert torch_tpu._C._recording_by_op() == {}
        assert_close_cpu(y, torch.full((4,), 6.0))


def test_materialisation_points():
    torch_tpu.set_execution_mode("defer_and_fuse")
    x = torch.arange(6.0, device="tpu")
    y = x * 2
    torch.tpu.synchronize()
    assert torch_tpu._C._pending_nodes() == 0
    assert stats()["materializations"]["synchronize"] >= 1
    z = y + 1
    torch_tpu.mark_step()
    assert torch_tpu._C._pending_nodes() == 0
    w = z.cumsum(0) + 0
    assert w.tolist() == torch.cumsum(torch.arange(6.0) * 2 + 1, 0).tolist()
    # A CPU-fallback op needs its inputs on the host: the graph runs first.
    torch_tpu._C._set_max_graph_nodes(10)
    try:
        for _ in range(25):
            z = z + 1
        assert torch_tpu._C._pending_nodes() < 10
        assert stats()["materializations"]["graph size limit"] >= 2
    finally:
        torch_tpu._C._set_max_graph_nodes(4000)
    assert z.sum().item() == float((torch.arange(6.0) * 2 + 1 + 25).sum())


def test_inplace_through_views_across_graphs():
    def program(dev):
        base = torch.zeros(4, 6, device=dev)
        row, col = base[1], base[:, 2]
        row.add_(1.0)
        col.mul_(3.0).add_(2.0)
        if dev == "tpu":
            torch_tpu.mark_step()  # a graph boundary in the middle
        base.t()[4].sub_(5.0)
        sibling = base[1:3, 1:5]
        sibling.mul_(2)
        return base, row, col, sibling
    torch_tpu.set_execution_mode("defer_and_fuse")
    got = program("tpu")
    want = program("cpu")
    for g, w in zip(got, want):
        assert_close_cpu(g, w)


def test_view_taken_before_and_read_after_materialisation():
    torch_tpu.set_execution_mode("defer_and_fuse")
    x = torch.arange(10.0).to("tpu")
    v = x[2:7]            # a view taken while nothing is pending
    x.mul_(10)            # deferred in-place on the base
    torch_tpu.mark_step()
    assert v.tolist() == [20.0, 30.0, 40.0, 50.0, 60.0]
    v.add_(1)             # deferred in-place through the view
    assert x.tolist() == [0, 10, 21, 31, 41, 51, 61, 70, 80, 90]


def test_freed_tensors_are_never_materialised():
    torch_tpu.set_execution_mode("defer_and_fuse")
    x = torch.ones(256, 1024, device="tpu")
    torch_tpu.mark_step()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    y = x * 2          # intermediates: freed before anything runs
    z = y.exp()
    del y
    out = (z + 1).sum()
    del z
    assert out.item() == pytest.approx(256 * 1024 * (torch.e ** 2 + 1), rel=1e-5)
    # Only the 4-byte result was materialised.
    assert torch.tpu.max_memory_allocated() - base <= 64


def test_peak_memory_is_lower_than_strict_eager():
    def peak(mode):
        torch_tpu.set_execution_mode(mode)
        x = torch.ones(512, 512, device="tpu")
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
        r = (((x * 2).exp() + 1).log() * 3).mean()
        r.item()
        p = torch.tpu.max_memory_allocated() - torch.tpu.memory_allocated()
        torch_tpu.set_execution_mode("strict_eager")
        return p
    assert peak("defer_and_fuse") < peak("strict_eager")


def _train(model_fn, data_fn, mode, steps):
    torch_tpu.set_execution_mode(mode)
    torch.manual_seed(0)
    model = model_fn().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = data_fn()
    x, y = x.to("tpu"), y.to("tpu")
    losses, compiles = [], []
    for _ in range(steps):
        loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        compiles.append(compiled())
    torch_tpu.set_execution_mode("strict_eager")
    return losses, compiles


class _GPTLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gpt = GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32))

    def forward(self, x, y):
        return self.gpt(x, y)[1]


class _CNNLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 4))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.net(x), y)


def _gpt_data():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 32, (4, 16), generator=g), torch.randint(0, 32, (4, 16), generator=g)


def _cnn_data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 4, (8,), generator=g)


@pytest.mark.parametrize("model_fn,data_fn", [(_GPTLoss, _gpt_data), (_CNNLoss, _cnn_data)],
                         ids=["gpt", "cnn"])
def test_training_30_steps_matches_strict_eager_without_recompiles(model_fn, data_fn):
    fused, compiles = _train(model_fn, data_fn, "defer_and_fuse", 30)
    eager, _ = _train(model_fn, data_fn, "strict_eager", 30)
    torch.testing.assert_close(torch.tensor(fused), torch.tensor(eager), rtol=1e-4, atol=1e-5)
    assert fused[-1] < fused[0]
    # Steady state: after warm-up no step compiles anything.
    assert compiles[-1] == compiles[3], compiles


def test_report_shows_modes_and_materialisations():
    torch_tpu.debug.reset_metrics()
    torch.ones(4, device="tpu").add(1).sum().item()          # strict eager
    with torch_tpu.execution_mode("defer_and_fuse"):
        x = torch.ones(4, device="tpu") * 2
        x.sum().item()                                        # a host read
    m = torch_tpu.debug.metrics()
    assert m["ops_by_mode"]["defer_and_fuse"] >= 3
    assert m["ops_by_mode"]["strict_eager"] >= 3
    assert m["materializations"]["host read"] >= 1
    text = torch_tpu.debug.report()
    assert "defer_and_fuse" in text and "host read" in text and "fused graphs" in text


def test_fused_compile_failure_names_the_op_and_its_python_stack():
    # A compile failure is injected for every program holding a sine; the fused
    # graph's error must name the recorded aten::sin and the user's lines.
    r = run_python("""
        import torch, torch_tpu
        torch_tpu.set_execution_mode("defer_and_fuse")
        x = torch.randn(4, device="tpu")

        def helper(t):
            return torch.sin(t) * 2

        w = helper(x + 1).exp()
        try:
            w.cpu()
        except RuntimeError as e:
            print("ERROR:", e)
        torch_tpu.set_execution_mode("strict_eager")
        print("AFTER:", (x + 1).cpu().shape)
    """, env={"TORCH_TPU_DEBUG_FAIL_COMPILE": "stablehlo.sine"})
    assert r.returncode == 0, r.stderr
    err = r.stdout.split("ERROR:", 1)[1]
    assert "failed to compile" in err and "(aten::sin)" in err, err
    assert 'File "<string>", line 7, in helper' in err, err   # the op's own line...
    assert 'File "<string>", line 9, in <module>' in err, err  # ...and its caller
    assert "AFTER: torch.Size([4])" in r.stdout                # the device still works


def test_recorded_stack_reads_generator_and_comprehension_frames():
    # The stack is read from the interpreter's frames without the GIL (PyTorch's
    # bindings release it around each op): frames of a generator and of a list
    # comprehension, pushed and popped by the interpreter in their own way, must
    # give the same lines as a traceback would.
    r = run_python("""
        import torch, torch_tpu
        torch_tpu.set_execution_mode("defer_and_fuse")
        x = torch.randn(4, device="tpu")

        def gen(t):
            for k in range(2):
                yield torch.sin(t + k)

        ws = [w * 2 for w in gen(x)]
        try:
            ws[1].cpu()
        except RuntimeError as e:
            print("ERROR:", e)
    """, env={"TORCH_TPU_DEBUG_FAIL_COMPILE": "stablehlo.sine"})
    assert r.returncode == 0, r.stderr
    err = r.stdout.split("ERROR:", 1)[1]
    assert "(aten::sin)" in err, err
    assert 'File "<string>", line 8, in gen' in err, err
    assert 'File "<string>", line 10, in <listcomp>' in err, err
    assert 'File "<string>", line 10, in <module>' in err, err


def test_pending_tensor_sent_to_another_process_is_materialised(tmp_path):
    # Sending a tpu tensor whose value is still pending runs the graph first; the
    # receiver gets the value on its own tpu device (PJRT shares no memory
    # between processes, so the tensor crosses by value, with a warning).
    # A script file, not `python -c`: spawned children import the worker from it.
    script = tmp_path / "send_tensor.py"
    script.write_text(textwrap.dedent("""
        import warnings
        import torch, torch_tpu
        import torch.multiprocessing as mp

        def worker(q_in, q_out):
            t, p = q_in.get()
            q_out.put((str(t.device), t.sum().item(), type(p).__name__, p.requires_grad, t * 2))

        if __name__ == "__main__":
            torch_tpu.set_execution_mode("defer_and_fuse")
            ctx = mp.get_context("spawn")
            q_in, q_out = ctx.Queue(), ctx.Queue()
            proc = ctx.Process(target=worker, args=(q_in, q_out))
            proc.start()
            x = torch.arange(4.0, device="tpu") * 3          # pending
            param = torch.nn.Parameter(torch.ones(2, device="tpu"))
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                q_in.put((x, param))
                dev, total, kind, grad, back = q_out.get(timeout=300)
            proc.join(300)
            print("RESULT", dev, total, kind, grad, back.device, back.cpu().tolist(), proc.exitcode)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=HANG_SECONDS)
    assert r.returncode == 0, r.stderr
    assert "RESULT tpu:0 18.0 Parameter True tpu:0 [0.0, 6.0, 12.0, 18.0] 0" in r.stdout, r.stdout

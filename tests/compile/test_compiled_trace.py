"""A compiled graph calls its executable directly after the first call: the FX
graph's Python is not re-run, so no ATen op reaches the generic kernel or the
recorder (counted: ops_executed and ops_recorded stay put), while input mutations,
outputs aliasing inputs and RNG draws behave exactly as in eager."""
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_tpu


def _dispatched():
    """Ops that went through the generic kernel (either eager mode) or the recorder."""
    return (torch_tpu.debug.metrics()["ops_executed"],
            torch_tpu._C._deferred_stats()["ops_recorded"])


def _f(x, buf):
    buf.add_(1)                                   # an input mutation
    y = F.dropout(x, 0.5, training=True) * 2      # RNG
    return y + buf.sum(), x.view(-1)[2:5]          # the second aliases the input


def test_mutation_alias_and_rng_100_calls_without_dispatch():
    torch.manual_seed(0)
    x_cpu = torch.randn(6, 8)
    calls = 100
    compiled = torch.compile(_f, backend="tpu")
    x, buf = x_cpu.to("tpu"), torch.zeros(8, device="tpu")
    torch.tpu.manual_seed(1234)
    got, per_call = [], []
    with torch.no_grad():
        for i in range(calls):
            before = _dispatched()
            out, alias = compiled(x, buf)
            after = _dispatched()
            if i == 0:
                frames = counters["stats"]["unique_graphs"]
            else:
                per_call.append((after[0] - before[0], after[1] - before[1]))
            assert alias.data_ptr() == x.data_ptr() + 2 * x.element_size()
            got.append((out.cpu(), alias.cpu(), buf.cpu()))
    assert counters["stats"]["unique_graphs"] == frames, "Dynamo recompiled"
    assert set(per_call) == {(0, 0)}, "a direct call dispatched or recorded ATen ops"
    (g,) = torch_tpu.debug.compiled_graphs()
    assert g["why_recorded"] is None
    assert g["calls"] == calls and g["direct_calls"] == calls - 1
    assert g["compiles"] + g["cache_hits"] == calls

    # The same calls in eager Defer & Fuse from the same seed: the generator
    # advances by exactly the same draws, so every result is identical.
    x2, buf2 = x_cpu.to("tpu"), torch.zeros(8, device="tpu")
    torch.tpu.manual_seed(1234)
    with torch_tpu.execution_mode("defer_and_fuse"), torch.no_grad():
        for i in range(calls):
            out, alias = _f(x2, buf2)
            want = got[i]
            assert torch.equal(want[0], out.cpu()), i
            assert torch.equal(want[1], alias.cpu()) and torch.equal(want[2], buf2.cpu()), i
    # ...and agree with the CPU (kept elements are scaled by 1/(1-p), then by 2).
    assert torch.equal(got[-1][2], torch.full((8,), float(calls)))
    assert torch.equal(got[-1][1], x_cpu.view(-1)[2:5])
    kept = got[-1][0] != float(calls * 8)
    torch.testing.assert_close(got[-1][0][kept], (x_cpu * 4 + calls * 8)[kept])


def test_training_graphs_call_directly():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    model = model.to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    for _ in range(4):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        loss = F.mse_loss(compiled(x.to("tpu")), y.to("tpu"))
        loss.backward()
        ref_loss = F.mse_loss(ref(x), y)
        ref_loss.backward()
        torch.testing.assert_close(loss.item(), ref_loss.item(), rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)
    graphs = torch_tpu.debug.compiled_graphs()
    assert sorted(g["kind"] for g in graphs) == ["backward", "forward"]
    for g in graphs:
        assert g["why_recorded"] is None and g["direct_calls"] == 3, g


def test_pending_eager_work_before_a_direct_call():
    f = torch.compile(lambda t: (t @ t).relu(), backend="tpu")
    a = torch.randn(3, 3)
    with torch_tpu.execution_mode("defer_and_fuse"):
        for k in range(3):
            b = a.to("tpu") * (k + 1) + 1  # pending when the graph is called
            ref = a * (k + 1) + 1
            torch.testing.assert_close(f(b).cpu(), (ref @ ref).relu())
    assert torch_tpu.debug.compiled_graphs()[0]["direct_calls"] == 2


def test_new_input_layout_is_captured_again():
    # Dynamo does not guard a view's storage offset or its base's size; the
    # program reads the whole storage, so a trace declines and another is captured.
    f = torch.compile(lambda t: t * 2 + 1, backend="tpu")
    base = torch.arange(20.0)
    dev = base.to("tpu")
    for lo in (0, 3, 0, 5):
        torch.testing.assert_close(f(dev[lo:lo + 4]).cpu(), base[lo:lo + 4] * 2 + 1)
    other = torch.arange(40.0)
    torch.testing.assert_close(f(other.to("tpu")[1:5]).cpu(), other[1:5] * 2 + 1)
    (g,) = torch_tpu.debug.compiled_graphs()
    assert g["calls"] == 5 and g["direct_calls"] >= 1


def test_graph_with_cpu_work_keeps_recording():
    def f(t):
        return t * torch.ones(4).add(2).to("tpu")  # CPU ops inside the graph

    compiled = torch.compile(f, backend="tpu")
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), x * 3)
    (g,) = torch_tpu.debug.compiled_graphs()
    assert g["direct_calls"] == 0 and g["why_recorded"] and g["calls"] == 3


def test_cpu_scalar_work_runs_in_a_prologue():
    # AdamW's pattern without capturable: a CPU 0-dim step count advanced in the
    # graph and a bias correction computed from it on the CPU, read by device ops.
    def f(p, step):
        step.add_(1)
        bc = 1 - torch.pow(0.9, step)
        p.mul_(0.5).add_(bc)
        return p * 2

    compiled = torch.compile(f, backend="tpu")
    p_cpu, step_cpu = torch.randn(6), torch.tensor(0.0)
    p, step = p_cpu.to("tpu"), torch.tensor(0.0)
    recorded = []
    with torch.no_grad():
        for i in range(20):
            before = torch_tpu._C._deferred_stats()["ops_recorded"]
            out = compiled(p, step)
            if i:
                recorded.append(torch_tpu._C._deferred_stats()["ops_recorded"] - before)
            want = f(p_cpu, step_cpu)
            assert step.device.type == "cpu" and step.item() == step_cpu.item() == i + 1
            torch.testing.assert_close(out.cpu(), want)
            torch.testing.assert_close(p.cpu(), p_cpu)
    assert set(recorded) == {0}, "a direct call recorded ATen ops"
    (g,) = torch_tpu.debug.compiled_graphs()
    assert g["why_recorded"] is None and g["direct_calls"] == 19, g


def test_written_input_shared_with_another_input_is_not_the_captured_program():
    # Captured with two storages; called with one storage as both inputs, the
    # program (which reads `b` before `a` is rewritten) no longer fits: the call
    # must not reuse it, and the results are eager's.
    def f(a, b):
        a.mul_(2)
        return b + 1

    compiled = torch.compile(f, backend="tpu")
    a, b = torch.arange(4.0).to("tpu"), torch.ones(4).to("tpu")
    with torch.no_grad():
        for _ in range(2):
            compiled(a, b)
        torch.testing.assert_close(a.cpu(), torch.arange(4.0) * 4)
        x = torch.arange(4.0).to("tpu")
        x_cpu = torch.arange(4.0)
        want = f(x_cpu, x_cpu)
        got = compiled(x, x)
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(x.cpu(), x_cpu)

"""The lean run-time of plain training graphs (torch_tpu/dynamo/lean_autograd.py):
outputs and gradients match the CPU, later calls launch both programs directly and
nothing recompiles, and graphs it does not handle (input mutation, outputs aliasing
inputs, RNG) take AOTAutograd's full path with the same results."""
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_tpu
from torch_tpu.dynamo import lean_autograd


def _is_lean(t):
    return type(t.grad_fn).__name__ == "_LeanFunctionBackward"


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def test_mlp_training_is_lean_and_matches_cpu():
    ref = _mlp()
    model = _mlp().to("tpu")

    def step(m, x, y):
        out = m(x)
        return out, F.mse_loss(out, y), out.argmax(-1)  # an integer (non-differentiable) output

    compiled = torch.compile(lambda x, y: step(model, x, y), backend="tpu")
    for i in range(5):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        out, loss, idx = compiled(x.to("tpu"), y.to("tpu"))
        assert _is_lean(loss) and _is_lean(out) and not idx.requires_grad
        loss.backward()  # `out` gets no gradient: its tangent is materialized as zeros
        r_out, r_loss, r_idx = step(ref, x, y)
        r_loss.backward()
        torch.testing.assert_close(out.cpu(), r_out, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(loss.cpu(), r_loss, rtol=1e-5, atol=1e-6)
        assert torch.equal(idx.cpu(), r_idx)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)
        if i == 0:
            frames = counters["stats"]["unique_graphs"]
            programs = torch_tpu.debug.metrics()["programs_compiled"]
    assert counters["stats"]["unique_graphs"] == frames, "Dynamo recompiled"
    assert torch_tpu.debug.metrics()["programs_compiled"] == programs, "a new program compiled"
    graphs = torch_tpu.debug.compiled_graphs()
    assert sorted(g["kind"] for g in graphs) == ["backward", "forward"]
    for g in graphs:
        assert g["why_recorded"] is None and g["calls"] == 5 and g["direct_calls"] == 4, g


def test_gradient_of_two_outputs_and_retain_graph():
    def f(x, w):
        return (x @ w).tanh(), (x.sum(0) * w).sum()

    w_cpu, x_cpu = torch.randn(4, 4), torch.randn(3, 4)
    w = w_cpu.to("tpu").requires_grad_()
    wr = w_cpu.clone().requires_grad_()
    a, b = torch.compile(f, backend="tpu")(x_cpu.to("tpu"), w)
    ra, rb = f(x_cpu, wr)
    assert _is_lean(a)
    (a.sum() * 2 + b).backward(retain_graph=True)
    (ra.sum() * 2 + rb).backward(retain_graph=True)
    torch.testing.assert_close(w.grad.cpu(), wr.grad, rtol=1e-5, atol=1e-5)
    a.sum().backward()  # the saved activations are still held
    ra.sum().backward()
    torch.testing.assert_close(w.grad.cpu(), wr.grad, rtol=1e-5, atol=1e-5)


def _falls_back(f, *args, why):
    # LAST_DECLINE keeps only the newest entries (a full list stays the same length), so
    # start it empty rather than comparing lengths.
    lean_autograd.LAST_DECLINE.clear()
    out = torch.compile(f, backend="tpu")(*args)
    assert lean_autograd.LAST_DECLINE, "the graph took the lean path"
    assert why in lean_autograd.LAST_DECLINE[-1], lean_autograd.LAST_DECLINE[-1]
    return out


def test_input_mutation_falls_back():
    def f(x, buf):
        buf.add_(1)
        return (x * buf).sum()

    x_cpu = torch.randn(4)
    x = x_cpu.to("tpu").requires_grad_()
    buf = torch.zeros(4, device="tpu")
    loss = _falls_back(f, x, buf, why="mutation")
    assert not _is_lean(loss)
    loss.backward()
    torch.testing.assert_close(buf.cpu(), torch.ones(4))
    torch.testing.assert_close(x.grad.cpu(), torch.ones(4))


def test_output_aliasing_an_input_falls_back():
    def f(x):
        return x.view(-1), (x * 3).sum()

    x_cpu = torch.randn(2, 3)
    x = x_cpu.to("tpu").requires_grad_()
    flat, s = _falls_back(f, x, why="alias")
    assert flat.data_ptr() == x.data_ptr()
    (flat.sum() + s).backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((2, 3), 4.0))


def test_rng_falls_back():
    def f(x):
        return F.dropout(x, 0.5, training=True).sum()

    x = torch.ones(64, device="tpu", requires_grad=True)
    loss = _falls_back(f, x, why="random op")
    loss.backward()
    kept = x.grad.cpu() != 0
    torch.testing.assert_close(x.grad.cpu()[kept], torch.full((int(kept.sum()),), 2.0))
    torch.testing.assert_close(loss.item(), 2.0 * int(kept.sum()))


def test_inference_graph_is_not_lean():
    w = torch.randn(4, 4, device="tpu", requires_grad=True)
    with torch.no_grad():
        _falls_back(lambda x: x @ w, torch.randn(2, 4, device="tpu"), why="grad mode is off")


def test_no_grad_inside_the_graph_falls_back():
    # A compiled inference step under grad mode: the graph turns grad mode off
    # itself, and its parameters require grad.
    ref = _mlp()
    model = _mlp().to("tpu")

    def step(m, x):
        with torch.no_grad():
            return m(x).sum()

    x = torch.randn(3, 8)
    got = _falls_back(lambda t: step(model, t), x.to("tpu"), why="grad mode")
    torch.testing.assert_close(got.item(), step(ref, x).item(), rtol=1e-5, atol=1e-5)


def test_double_backward_is_refused():
    w = torch.randn(4, device="tpu", requires_grad=True)
    y = torch.compile(lambda x: (x * w).pow(2).sum(), backend="tpu")(torch.randn(4, device="tpu"))
    assert _is_lean(y)
    try:
        torch.autograd.grad(y, w, create_graph=True)
    except RuntimeError as e:
        assert "double backward" in str(e)
    else:
        raise AssertionError("double backward through a lean graph did not raise")


def test_selective_activation_checkpointing_with_dtype_conversion():
    """A selectively checkpointed block with `.float()`/`.to(dtype)` (TorchTitan's default
    AC around each compiled block): tracing records aten._assert_tensor_metadata, which the
    partitioner refuses in an AC graph unless it is removed first."""
    from functools import partial

    from torch.utils.checkpoint import (CheckpointPolicy, checkpoint,
                                        create_selective_checkpoint_contexts)

    def policy(ctx, op, *args, **kwargs):
        return (CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default
                else CheckpointPolicy.PREFER_RECOMPUTE)

    def block(x, w):
        h = (x @ w).float().to(torch.float32)
        return F.silu(h.to(x.dtype)) @ w

    def f(x, w):
        return checkpoint(block, x, w, use_reentrant=False,
                          context_fn=partial(create_selective_checkpoint_contexts, policy))

    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    ref = f(x, w)
    ref.sum().backward()
    wt = w.detach().to("tpu").requires_grad_()
    out = torch.compile(f, backend="tpu")(x.to("tpu"), wt)
    assert _is_lean(out)
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)

"""Shared checker for the op-family lowering tests: runs a function on CPU and on
tpu, compares outputs and (optionally) input gradients, and asserts that nothing
fell back to the CPU."""
import torch
import torch_tpu

from conftest import assert_close_cpu


def _to(x, device, grad):
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        if grad and y.is_floating_point():
            y.requires_grad_(True)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(_to(e, device, grad) for e in x)
    return x


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    return []


def _leaves(args):
    return [t for t in _flat(list(args)) if t.requires_grad]


def check(fn, *args, grad=True, atol=None, rtol=None, exact_out=None, **close_kw):
    """fn(*args) on CPU vs tpu. Float tensor args get requires_grad when `grad`;
    the backward pass uses sum(out * w) with fixed random weights w."""
    kw = {} if atol is None else dict(atol=atol, rtol=rtol if rtol is not None else atol)
    kw.update(close_kw)
    cpu_args = _to(args, "cpu", grad)
    tpu_args = _to(args, "tpu", grad)
    torch_tpu.debug.reset_metrics()
    out_tpu = _flat(fn(*tpu_args))
    out_cpu = _flat(fn(*cpu_args))
    assert len(out_tpu) == len(out_cpu)
    for i, (t, c) in enumerate(zip(out_tpu, out_cpu)):
        if exact_out is not None and i not in exact_out:
            continue
        assert_close_cpu(t, c.detach() if c.requires_grad else c, **kw)
    if grad:
        diff = [(t, c) for t, c in zip(out_tpu, out_cpu) if c.requires_grad]
        if diff:
            gen = torch.Generator().manual_seed(1)
            ws = [torch.randn(c.shape, generator=gen, dtype=c.dtype) for _, c in diff]
            sum((c * w).sum() for (_, c), w in zip(diff, ws)).backward()
            sum((t * w.to("tpu")).sum() for (t, _), w in zip(diff, ws)).backward()
            for lt, lc in zip(_leaves(tpu_args), _leaves(cpu_args)):
                assert (lt.grad is None) == (lc.grad is None)
                if lc.grad is not None:
                    assert_close_cpu(lt.grad, lc.grad, **kw)
    fallbacks = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
    return out_tpu

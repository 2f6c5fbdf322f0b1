"""Fused optimizer lowerings (csrc/lower/optim.cc) against PyTorch's CPU fused kernels."""
import copy

import pytest
import torch

import torch_tpu


def _params():
    torch.manual_seed(0)
    return [torch.randn(5, 4), torch.randn(7), torch.randn(3, 2, 2)]


def _run(opt_cls, device, steps=3, **kw):
    params = [p.clone().to(device).requires_grad_(True) for p in _params()]
    opt = opt_cls(params, fused=True, **kw)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        opt.step()
    return params, opt


def _compare(opt_cls, **kw):
    torch_tpu.debug.reset_metrics()
    tp, topt = _run(opt_cls, "tpu", **kw)
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]
    cp, copt = _run(opt_cls, "cpu", **kw)
    for a, b in zip(tp, cp):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(topt.state.values(), copt.state.values()):
        for k in b:
            if isinstance(b[k], torch.Tensor):
                torch.testing.assert_close(a[k].cpu(), b[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1), dict(amsgrad=True, weight_decay=0.01),
                                dict(maximize=True, lr=0.01)])
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW], ids=["adam", "adamw"])
def test_fused_adam(cls, kw):
    _compare(cls, **kw)


def test_fused_adamw_tensor_lr():
    _compare(torch.optim.AdamW, lr=torch.tensor(0.01))


@pytest.mark.parametrize("kw", [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.1, momentum=0.9, nesterov=True),
                                dict(lr=0.05, momentum=0.8, dampening=0.1, weight_decay=0.01, maximize=True)])
def test_fused_sgd(kw):
    _compare(torch.optim.SGD, **kw)


def test_fused_adam_grad_scale_and_found_inf():
    """grad_scale unscales (and writes back) the grads; found_inf=1 skips the step."""
    def run(device, found):
        ps = [p.to(device) for p in _params()]
        gs = [torch.full_like(p, 2.0) for p in ps]
        m = [torch.zeros_like(p) for p in ps]
        v = [torch.zeros_like(p) for p in ps]
        steps = [torch.tensor(1.0, device=device) for _ in ps]
        torch._fused_adam_(ps, gs, m, v, [], steps, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0,
                           eps=1e-8, amsgrad=False, maximize=False,
                           grad_scale=torch.tensor(4.0, device=device),
                           found_inf=torch.tensor(found, device=device))
        return ps + gs + m + v
    for found in (0.0, 1.0):
        torch_tpu.debug.reset_metrics()
        out = run("tpu", found)
        assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == 0
        for a, b in zip(out, run("cpu", found)):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)

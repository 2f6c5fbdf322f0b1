"""The fused LSTM/GRU cells (what lstm_cell, gru_cell, nn.LSTM and nn.GRU run on a
PrivateUse1 device) and their backward kernels, against PyTorch's CPU backend."""
import pytest
import torch

from conftest import assert_close_cpu


def _grads_close(tpu_params, cpu_params, **tol):
    for p, q in zip(tpu_params, cpu_params):
        assert_close_cpu(p.grad, q.grad, **tol)


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU], ids=["lstm", "gru"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_rnn_module_forward_backward(cls, bias, metrics_delta):
    torch.manual_seed(0)
    cpu = cls(5, 7, num_layers=2, bias=bias)
    tpu = cls(5, 7, num_layers=2, bias=bias)
    tpu.load_state_dict(cpu.state_dict())
    tpu = tpu.to("tpu")
    x = torch.randn(4, 3, 5)
    out_c, _ = cpu(x)
    out_t, _ = tpu(x.to("tpu"))
    assert_close_cpu(out_t, out_c)
    out_c.square().sum().backward()
    out_t.square().sum().backward()
    _grads_close(list(tpu.parameters()), list(cpu.parameters()), rtol=1e-4, atol=1e-5)
    assert metrics_delta("cpu_fallback_ops") == 0


@pytest.mark.parametrize("which", ["lstm", "gru"])
def test_cells_with_state_gradients(which):
    torch.manual_seed(0)
    n, h = 3, 4
    chunks = 4 if which == "lstm" else 3
    x = torch.randn(n, 6, requires_grad=True)
    hx = torch.randn(n, h, requires_grad=True)
    cx = torch.randn(n, h, requires_grad=True)
    w_ih, w_hh = torch.randn(chunks * h, 6), torch.randn(chunks * h, h)
    b_ih, b_hh = torch.randn(chunks * h), torch.randn(chunks * h)

    def run(dev):
        leaves = [t.detach().to(dev).requires_grad_() for t in (x, hx, cx, w_ih, w_hh, b_ih, b_hh)]
        xi, hi, ci, wi, wh, bi, bh = leaves
        if which == "lstm":
            hy, cy = torch.lstm_cell(xi, (hi, ci), wi, wh, bi, bh)
            (hy.sin().sum() + cy.cos().sum()).backward()
            outs = [hy, cy]
        else:
            hy = torch.gru_cell(xi, hi, wi, wh, bi, bh)
            hy.sin().sum().backward()
            outs = [hy]
        return outs, [t.grad for t in leaves]

    (outs_t, grads_t), (outs_c, grads_c) = run("tpu"), run("cpu")
    for a, b in zip(outs_t, outs_c):
        assert_close_cpu(a.detach(), b.detach())
    for a, b in zip(grads_t, grads_c):
        if b is None:
            assert a is None
        else:
            assert_close_cpu(a, b, rtol=1e-4, atol=1e-5)

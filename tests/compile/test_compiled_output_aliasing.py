"""A compiled graph's output that shares storage with one of the graph's intermediates
(reshape's copying branch: clone + _unsafe_view) must not reach the caller as a view:
autograd.Function would mark it "a view created inside a custom Function", and an
in-place write to it afterwards, which works on the CPU, fails (Longformer writes its
global-attention rows into such a result after a graph break)."""
import pytest
import torch

TOL = dict(rtol=1e-4, atol=1e-5)


def _regroup(x):
    # x is (B, L, H, D) laid out so that the transpose is not viewable: reshape copies
    return x.transpose(0, 1).reshape(x.shape[1], x.shape[0], -1).contiguous()


def _step(x, rows, new, regroup):
    y = regroup(x.transpose(1, 2) * 2)  # (L, B, H*D)
    y[rows] = new                        # in place, outside the compiled graph
    return y


@pytest.mark.parametrize("lean", ["1", "0"])  # the lean run-time and AOTAutograd's full one
def test_inplace_write_into_reshape_copy_returned_by_a_graph(lean, monkeypatch):
    monkeypatch.setenv("TORCH_TPU_COMPILE_LEAN", lean)
    torch._dynamo.reset()
    compiled = torch.compile(_regroup, backend="tpu")
    base = torch.randn(2, 3, 5, 4)
    rows = torch.tensor([1, 3])
    new = torch.randn(2, 2, 12)
    for _ in range(2):  # the recorded first call and the directly called program after it
        x = base.clone().requires_grad_(True)
        want = _step(x, rows, new, _regroup)
        want.square().sum().backward()
        tx = base.to("tpu").requires_grad_(True)
        got = _step(tx, rows.to("tpu"), new.to("tpu"), compiled)
        got.square().sum().backward()
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL)
        torch.testing.assert_close(tx.grad.cpu(), x.grad, **TOL)

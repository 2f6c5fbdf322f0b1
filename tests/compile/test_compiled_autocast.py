"""torch.compile(backend="tpu") under autocast: AOTAutograd traces the casts the
AutocastPrivateUse1 kernels make, so compiled graphs compute what eager does."""
import torch
import torch.nn.functional as F

from conftest import assert_close_cpu


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 4)).to("tpu")


def test_autocast_around_a_compiled_model():
    net = _net()
    x = torch.randn(5, 8, device="tpu")
    compiled = torch.compile(net, backend="tpu")
    with torch.autocast("tpu"):
        want = net(x)
        got = compiled(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert_close_cpu(got, want.cpu(), rtol=1e-2, atol=1e-2)


def test_autocast_inside_a_compiled_function_and_its_backward():
    net = _net()
    x = torch.randn(5, 8, device="tpu")

    def loss_fn(inp):
        with torch.autocast("tpu", dtype=torch.bfloat16):
            h = net(inp)
            s = F.softmax(h, -1)  # fp32 policy inside the region
        return h, s, s.square().mean()

    h, s, loss = torch.compile(loss_fn, backend="tpu")(x)
    assert h.dtype == torch.bfloat16 and s.dtype == torch.float32
    loss.backward()
    grads = [p.grad.clone() for p in net.parameters()]
    assert all(g.dtype == torch.float32 for g in grads)
    net.zero_grad()
    h_e, s_e, loss_e = loss_fn(x)
    loss_e.backward()
    assert_close_cpu(loss, loss_e.detach().cpu(), rtol=1e-2, atol=1e-3)
    for g, p in zip(grads, net.parameters()):
        assert_close_cpu(g, p.grad.cpu(), rtol=2e-2, atol=2e-3)

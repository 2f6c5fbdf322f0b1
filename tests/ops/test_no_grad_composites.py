"""torch.matmul of batched matrices and cross_entropy over class indices run as one
op each when no gradient is recorded (csrc/aten/no_grad_composites.cc): attention's
products of transposed views are not copied first, cross_entropy is one program,
results equal the CPU's, and every other case (gradients, forward-mode tangents,
dispatch modes, fake tensors, bad input) behaves as PyTorch's decomposition."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import torch_tpu
from conftest import assert_close_cpu

B, T, H, D = 2, 6, 3, 4


def heads(x):
    """[B, T, H*D] -> the transposed view [B, H, T, D] attention multiplies."""
    return x.view(B, T, H, D).transpose(1, 2)


def qkv(device):
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, T, 3 * H * D, generator=g).to(device).split(H * D, dim=2)


def ops_run(fn):
    before = torch_tpu.debug.metrics()["ops_executed"]
    out = fn()
    return out, torch_tpu.debug.metrics()["ops_executed"] - before


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_attention_products_of_views_are_one_op_each(context):
    q, k, v = (heads(t) for t in qkv("tpu"))
    cq, ck, cv = (heads(t) for t in qkv("cpu"))
    with getattr(torch, context)():
        att, n = ops_run(lambda: q @ k.transpose(-2, -1))
        assert n == 1  # no copies of q and k before the product
        y, n = ops_run(lambda: att.softmax(-1) @ v)
        assert n == 2
        assert_close_cpu(att, cq @ ck.transpose(-2, -1))
        assert_close_cpu(y, (cq @ ck.transpose(-2, -1)).softmax(-1) @ cv)
        assert att.is_contiguous() and att.shape == (B, H, T, T)
        w = torch.randn(D, 5)
        assert_close_cpu(q @ w.to("tpu"), cq @ w)  # by one matrix
        assert_close_cpu(q @ w.to("tpu").t().t(), cq @ w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_dtypes_match_cpu(dtype):
    a = torch.randn(2, 3, 5, 7).to(dtype)
    b = torch.randn(2, 3, 7, 4).to(dtype)
    with torch.no_grad():
        out = a.to("tpu").transpose(0, 1) @ b.to("tpu").transpose(0, 1)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else {}
    assert out.dtype == dtype
    assert_close_cpu(out, a.transpose(0, 1) @ b.transpose(0, 1), **tol)


def test_gradients_still_flow_through_the_decomposition():
    q, k, _ = (heads(t).detach().requires_grad_() for t in qkv("tpu"))
    cq, ck, _ = (heads(t).detach().requires_grad_() for t in qkv("cpu"))
    (q @ k.transpose(-2, -1)).square().sum().backward()
    (cq @ ck.transpose(-2, -1)).square().sum().backward()
    assert_close_cpu(q.grad, cq.grad)
    assert_close_cpu(k.grad, ck.grad)


def test_forward_mode_tangents_are_kept():
    import torch.autograd.forward_ad as fwAD
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    ta, tb = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    with torch.no_grad(), fwAD.dual_level():
        out = fwAD.unpack_dual(fwAD.make_dual(a.to("tpu"), ta.to("tpu")) @ b.to("tpu")).tangent
        ref = fwAD.unpack_dual(fwAD.make_dual(a, ta) @ b).tangent
    assert out is not None
    assert_close_cpu(out, ref)
    with torch.no_grad():
        assert_close_cpu(torch.func.jvp(torch.matmul, (a.to("tpu"), b.to("tpu")),
                                        (ta.to("tpu"), tb.to("tpu")))[1],
                         torch.func.jvp(torch.matmul, (a, b), (ta, tb))[1])


def test_a_dispatch_mode_sees_the_products():
    a, b = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 7, 4)
    counts = []
    for dev in ("cpu", "tpu"):
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            a.to(dev).transpose(0, 1) @ b.to(dev).transpose(0, 1)
        counts.append(fc.get_total_flops())
    assert counts[0] == counts[1] > 0


@pytest.mark.strict_only
def test_compiled_no_grad_products_of_views():
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: a.transpose(1, 2) @ b.transpose(1, 2).transpose(-2, -1),
                      backend="tpu")
    a, b = torch.randn(2, 5, 3, 4), torch.randn(2, 5, 3, 4)
    with torch.no_grad():
        out = f(a.to("tpu"), b.to("tpu"))
    assert_close_cpu(out, a.transpose(1, 2) @ b.transpose(1, 2).transpose(-2, -1))
    torch._dynamo.reset()


def test_bad_input_raises_as_on_cpu():
    a, b = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    for x, y in [(a, b), (a, a.double().transpose(1, 2)), (a, torch.randn(3, 4, 6))]:
        with pytest.raises(RuntimeError):
            x @ y  # the CPU refuses these
        with torch.no_grad(), pytest.raises(RuntimeError):
            x.to("tpu") @ y.to("tpu")


# ------------------------------------------------------------------ cross_entropy

def scores_and_targets(n=6, c=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, c, generator=g), torch.randint(0, c, (n,), generator=g)


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_is_one_op(context, reduction):
    x, t = scores_and_targets()
    w = torch.rand(5) + 0.5
    with getattr(torch, context)():
        for ignored, kw in ((-100, {}), (-100, {"weight": w}), (3, {"ignore_index": 3})):
            t[2] = ignored
            dev = {k: (v.to("tpu") if torch.is_tensor(v) else v) for k, v in kw.items()}
            tx, tt = x.to("tpu"), t.to("tpu")
            out, n = ops_run(lambda: F.cross_entropy(tx, tt, reduction=reduction, **dev))
            assert n == 1  # not log_softmax and nll_loss
            assert_close_cpu(out, F.cross_entropy(x, t, reduction=reduction, **kw))
        one = F.cross_entropy(x[0].to("tpu"), t[0].to("tpu"))  # one sample: [C] and []
        assert_close_cpu(one, F.cross_entropy(x[0], t[0]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cross_entropy_rounds_as_the_decomposition(dtype):
    x, t = scores_and_targets(n=64, c=33, seed=1)
    x = x.to(dtype)
    with torch.no_grad():
        out = F.cross_entropy(x.to("tpu"), t.to("tpu"))
    assert out.dtype == dtype
    assert_close_cpu(out, F.cross_entropy(x, t), rtol=1e-2, atol=1e-2)


def test_cross_entropy_other_forms_decompose():
    x, t = scores_and_targets()
    probs = torch.rand(6, 5).softmax(-1)
    x4, t4 = torch.randn(2, 5, 3, 3), torch.randint(0, 5, (2, 3, 3))
    with torch.no_grad():
        assert_close_cpu(F.cross_entropy(x.to("tpu"), t.to("tpu"), label_smoothing=0.1),
                         F.cross_entropy(x, t, label_smoothing=0.1))
        assert_close_cpu(F.cross_entropy(x.to("tpu"), probs.to("tpu")), F.cross_entropy(x, probs))
        assert_close_cpu(F.cross_entropy(x4.to("tpu"), t4.to("tpu")), F.cross_entropy(x4, t4))
    xg = x.to("tpu").requires_grad_()
    F.cross_entropy(xg, t.to("tpu")).backward()
    xc = x.clone().requires_grad_()
    F.cross_entropy(xc, t).backward()
    assert_close_cpu(xg.grad, xc.grad)


def test_cross_entropy_bad_targets_raise_as_on_cpu():
    x, t = scores_and_targets()
    t[1] = 7
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, t)
    with torch.no_grad(), pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x.to("tpu"), t.to("tpu")).item()
    with torch.no_grad(), pytest.raises(ValueError, match="batch_size"):
        F.cross_entropy(x.to("tpu"), t[:4].to("tpu"))  # a batch mismatch, as on the CPU

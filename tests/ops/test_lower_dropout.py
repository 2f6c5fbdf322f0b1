"""Dropout lowering (csrc/lower/dropout.cc). Random: checks statistics,
scaling, the mask/gradient relation and determinism under a seed."""
import torch
import torch.nn.functional as F
import torch_tpu


def test_dropout_mask_scale_and_grad():
    torch_tpu.debug.reset_metrics()
    x = torch.randn(64, 128, device="tpu", requires_grad=True)
    y = F.dropout(x, p=0.25, training=True)
    y.sum().backward()
    xc, yc, gc = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
    kept = yc != 0
    frac = kept.float().mean().item()
    assert 0.70 < frac < 0.80, frac
    torch.testing.assert_close(yc[kept], xc[kept] / 0.75)
    torch.testing.assert_close(gc, kept.float() / 0.75)
    assert not torch_tpu.debug.metrics()["cpu_fallback_counts"]


def test_dropout_seeded_and_eval():
    x = torch.ones(1000, device="tpu")
    torch.manual_seed(3)
    a = F.dropout(x, 0.5).cpu()
    torch.manual_seed(3)
    b = F.dropout(x, 0.5).cpu()
    c = F.dropout(x, 0.5).cpu()
    torch.testing.assert_close(a, b)
    assert not torch.equal(a, c)
    torch.testing.assert_close(F.dropout(x, 0.5, training=False).cpu(), x.cpu())
    assert (F.dropout(x, 1.0).cpu() == 0).all()

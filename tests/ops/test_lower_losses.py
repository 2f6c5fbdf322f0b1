"""Loss lowerings (csrc/lower/losses.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
X = torch.randn(4, 6)
Y = torch.randn(4, 6)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("fn", [
    F.mse_loss, F.l1_loss,
    lambda x, y, reduction: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.7),
    lambda x, y, reduction: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.0),
    lambda x, y, reduction: F.huber_loss(x, y, reduction=reduction, delta=0.8),
], ids=["mse", "l1", "smooth_l1", "smooth_l1_beta0", "huber"])
def test_regression_losses(fn, reduction):
    check(lambda x, y: fn(x, y, reduction=reduction), X, Y, atol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(reduction):
    p = torch.rand(4, 6) * 0.98 + 0.01
    t = torch.rand(4, 6)
    w = torch.rand(6)
    check(lambda p, t: F.binary_cross_entropy(p, t, reduction=reduction), p, t, atol=1e-5)
    check(lambda p: F.binary_cross_entropy(p, t.to(p.device), w.to(p.device), reduction=reduction), p, atol=1e-5)
    check(lambda x: F.binary_cross_entropy_with_logits(x, t.to(x.device), reduction=reduction), X, atol=1e-5)


def test_cross_entropy_variants():
    tgt = torch.tensor([0, 5, 2, 5])
    check(lambda x: F.cross_entropy(x, tgt.to(x.device), label_smoothing=0.1), X, atol=1e-5)
    check(lambda x: F.cross_entropy(x, tgt.to(x.device), ignore_index=5), X, atol=1e-5)

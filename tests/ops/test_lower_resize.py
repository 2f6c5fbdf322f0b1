"""Interpolation lowerings (csrc/lower/resize.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
X = torch.randn(2, 3, 5, 6)


@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(7, 4)), dict(scale_factor=1.5),
                                dict(size=(10, 12))])
def test_nearest(kw):
    check(lambda x: F.interpolate(x, mode="nearest", **kw), X, atol=1e-6)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", [dict(scale_factor=2), dict(size=(3, 9)), dict(scale_factor=0.5)])
def test_bilinear(kw, align):
    check(lambda x: F.interpolate(x, mode="bilinear", align_corners=align, **kw), X, atol=1e-5)


def test_upsample_module_non_contiguous():
    x = torch.randn(2, 5, 6, 3).permute(0, 3, 1, 2)
    check(lambda x: torch.nn.Upsample(scale_factor=2)(x), x, atol=1e-6)

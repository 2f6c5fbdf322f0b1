"""Pooling lowerings (csrc/lower/pooling.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)


@pytest.mark.parametrize("cfg", [
    dict(k=2, s=None, p=0, d=1, ceil=False, shape=(2, 3, 8, 8)),
    dict(k=3, s=2, p=1, d=1, ceil=False, shape=(1, 2, 9, 7)),
    dict(k=3, s=2, p=1, d=1, ceil=True, shape=(2, 2, 8, 8)),
    dict(k=(2, 3), s=(1, 2), p=(1, 0), d=(2, 1), ceil=False, shape=(3, 7, 9)),
])
def test_max_pool2d(cfg):
    x = torch.randn(cfg["shape"])
    out = check(lambda x: F.max_pool2d(x, cfg["k"], cfg["s"], cfg["p"], cfg["d"], cfg["ceil"], return_indices=True),
                x)
    assert out[1].dtype == torch.int64


def test_max_pool2d_ties_and_nan():
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 2, 3] = -float("inf")
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x, grad=False, equal_nan=True)


@pytest.mark.parametrize("cfg", [
    dict(k=2, s=None, p=0, ceil=False, cip=True, div=None, shape=(2, 3, 8, 8)),
    dict(k=3, s=2, p=1, ceil=True, cip=True, div=None, shape=(1, 2, 9, 8)),
    dict(k=3, s=2, p=1, ceil=False, cip=False, div=None, shape=(2, 7, 7)),
    dict(k=(2, 3), s=(2, 1), p=(1, 1), ceil=True, cip=False, div=5, shape=(1, 2, 5, 6)),
])
def test_avg_pool2d(cfg):
    x = torch.randn(cfg["shape"])
    check(lambda x: F.avg_pool2d(x, cfg["k"], cfg["s"], cfg["p"], cfg["ceil"], cfg["cip"], cfg["div"]), x,
          atol=1e-5)


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 8), (1, 1)), ((2, 3, 8, 8), (4, 2)),
                                       ((1, 2, 7, 5), (3, 4)), ((3, 6, 6), (2, 3))])
def test_adaptive_avg_pool2d(shape, out):
    check(lambda x: F.adaptive_avg_pool2d(x, out), torch.randn(shape), atol=1e-5)


def test_pool_non_contiguous():
    x = torch.randn(2, 8, 8, 3).permute(0, 3, 1, 2)
    check(lambda x: F.max_pool2d(x, 2), x)
    check(lambda x: F.avg_pool2d(x, 2), x, atol=1e-5)


def test_pool3d():
    x = torch.randn(2, 2, 5, 6, 4)
    check(lambda x: F.max_pool3d(x, 2, return_indices=True), x)
    check(lambda x: F.max_pool3d(x, (3, 2, 2), (2, 1, 2), 1, ceil_mode=True, return_indices=True), x)
    check(lambda x: F.avg_pool3d(x, 2), x, atol=1e-5)
    check(lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False), x[0], atol=1e-5)


def test_pool1d_via_2d():
    x = torch.randn(2, 3, 11)
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), x)
    check(lambda x: F.avg_pool1d(x, 2), x, atol=1e-5)
    check(lambda x: F.adaptive_avg_pool1d(x, 4), x, atol=1e-5)

"""Distance, grid-sampling, adaptive-pooling and fold/unfold lowerings
(csrc/lower/distance.cc, grid_sample.cc, adaptive_pool.cc, fold.cc) against
PyTorch CPU, forward and input gradients."""
import math

import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)

P_VALUES = [0.0, 1.0, 2.0, math.inf, 0.5, 1.5, 3.0]


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist(p):
    a, b = torch.randn(2, 5, 3), torch.randn(2, 4, 3)
    check(lambda x, y: torch.cdist(x, y, p=p), a, b, atol=1e-4)


def test_cdist_broadcast_and_compute_mode():
    a, b = torch.randn(3, 1, 4, 2), torch.randn(2, 6, 2)
    check(lambda x, y: torch.cdist(x, y, p=2.0, compute_mode="donot_use_mm_for_euclid_dist"),
          a, b, atol=1e-4)
    check(lambda x, y: torch.cdist(x, y, p=1.0, compute_mode="use_mm_for_euclid_dist"), a, b,
          atol=1e-4)


def test_cdist_backward_zero_distance():
    a = torch.randn(4, 3)
    check(lambda x, y: torch.cdist(x, y, p=2.0), a, a.clone(), atol=1e-4)


@pytest.mark.parametrize("p", P_VALUES)
def test_pdist(p):
    check(lambda x: F.pdist(x, p=p), torch.randn(6, 3), atol=1e-4)


def test_pdist_single_row():
    check(lambda x: F.pdist(x), torch.randn(1, 3), atol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample(mode, padding, align):
    x = torch.randn(2, 3, 5, 6)
    grid = torch.rand(2, 4, 7, 2) * 2.6 - 1.3  # some samples fall outside
    check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align),
          x, grid, atol=1e-4)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_3d(mode, padding, align):
    x = torch.randn(2, 2, 3, 4, 5)
    grid = torch.rand(2, 3, 2, 4, 3) * 2.6 - 1.3
    check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=align),
          x, grid, atol=1e-4)


def test_grid_sample_3d_bicubic_rejected():
    x, grid = torch.randn(1, 1, 2, 2, 2).to("tpu"), torch.zeros(1, 1, 1, 1, 3).to("tpu")
    with pytest.raises(RuntimeError, match="bicubic"):
        F.grid_sample(x, grid, mode="bicubic", align_corners=False)


def test_grid_sample_bfloat16():
    x = torch.randn(1, 2, 4, 5).bfloat16()
    grid = (torch.rand(1, 3, 3, 2) * 2 - 1).bfloat16()
    # PyTorch's CPU kernel does the coordinate arithmetic in bfloat16; we do it
    # in float32, so results differ by a few bfloat16 ulps.
    check(lambda a, g: F.grid_sample(a, g, align_corners=False), x, grid, grad=False,
          atol=6e-2)


@pytest.mark.parametrize("shape,out", [((2, 3, 5, 6, 7), (2, 3, 4)), ((3, 4, 4, 4), (4, 2, 1)),
                                       ((1, 2, 3, 5, 2), 6)])
def test_adaptive_avg_pool3d(shape, out):
    check(lambda x: F.adaptive_avg_pool3d(x, out), torch.randn(shape), atol=1e-5)


@pytest.mark.parametrize("shape,out", [((2, 3, 7, 5), (3, 2)), ((3, 6, 6), (4, 4)),
                                       ((1, 2, 3, 4), (5, 7)), ((1, 4, 4, 3), (3, None))])
def test_adaptive_max_pool2d(shape, out):
    check(lambda x: F.adaptive_max_pool2d(x, out, return_indices=True), torch.randn(shape))


@pytest.mark.parametrize("shape,out", [((2, 3, 5, 6, 7), (2, 3, 4)), ((2, 4, 4, 5), (3, 2, 2))])
def test_adaptive_max_pool3d(shape, out):
    check(lambda x: F.adaptive_max_pool3d(x, out, return_indices=True), torch.randn(shape))


def test_adaptive_max_pool_ties_and_nan():
    # Ties keep the first maximum in row-major order; a NaN wins.
    x = torch.zeros(1, 1, 4, 4)
    check(lambda a: F.adaptive_max_pool2d(a, 2, return_indices=True), x)
    x = torch.randn(1, 2, 5, 5)
    x[0, 0, 1, 2] = float("nan")
    x[0, 1, 4, 4] = float("nan")
    check(lambda a: F.adaptive_max_pool2d(a, 3, return_indices=True), x, grad=False,
          equal_nan=True)


def test_adaptive_max_pool1d():
    check(lambda x: F.adaptive_max_pool1d(x, 4, return_indices=True), torch.randn(2, 3, 9))


def test_adaptive_pool_bfloat16():
    x = torch.randn(2, 3, 5, 6, 7).bfloat16()
    check(lambda a: F.adaptive_avg_pool3d(a, (2, 3, 4)), x, atol=2e-2)
    check(lambda a: F.adaptive_max_pool3d(a, (2, 3, 4)), x, atol=2e-2)


@pytest.mark.parametrize("kernel,dilation,padding,stride",
                         [((2, 3), 1, 0, 1), (3, (2, 1), 1, 2), ((2, 2), 1, (1, 0), (1, 3))])
def test_unfold_fold(kernel, dilation, padding, stride):
    x = torch.randn(2, 3, 7, 8)
    check(lambda a: F.unfold(a, kernel, dilation, padding, stride), x, atol=1e-5)
    cols = F.unfold(x, kernel, dilation, padding, stride)
    check(lambda c: F.fold(c, (7, 8), kernel, dilation, padding, stride), cols, atol=1e-5)


def test_unfold_fold_unbatched_and_bfloat16():
    x = torch.randn(3, 6, 5)
    check(lambda a: F.unfold(a, 2), x, atol=1e-5)
    check(lambda c: F.fold(c, (6, 5), 2), F.unfold(x, 2), atol=1e-5)
    xb = x.bfloat16()
    check(lambda a: F.fold(F.unfold(a, 3, padding=1), (6, 5), 3, padding=1), xb, atol=5e-2)

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
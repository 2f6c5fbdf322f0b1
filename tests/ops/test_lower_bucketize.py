"""bucketize.Tensor / bucketize.Scalar (csrc/lower/bucketize.cc) against PyTorch CPU, in
both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

from lower_check import check

BOUNDS = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0])


@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("out_int32", [False, True])
def test_bucketize_tensor(right, out_int32):
    x = torch.tensor([[-3.0, -1.0, 0.0, 0.25], [0.5, 1.0, 2.0, 9.0]])
    check(lambda a, bd: torch.bucketize(a, bd, right=right, out_int32=out_int32), x, BOUNDS, grad=False)


def test_bucketize_edge_values():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    check(lambda a, bd: torch.bucketize(a, bd), x, BOUNDS, grad=False)
    check(lambda a, bd: torch.bucketize(a, bd, right=True), x, BOUNDS, grad=False)


def test_bucketize_integers_scalar_and_empty():
    check(lambda a, bd: torch.bucketize(a, bd), torch.randint(-5, 5, (7, 3)),
          torch.tensor([-2, 0, 3]), grad=False)
    check(lambda a, bd: torch.bucketize(a, bd), torch.tensor(0.3), BOUNDS, grad=False)
    check(lambda a, bd: torch.bucketize(a, bd), torch.empty(0, 2), BOUNDS, grad=False)
    check(lambda bd: torch.bucketize(0.75, bd, right=True), BOUNDS, grad=False)


def test_idefics_style_position_buckets():
    """Idefics2/3's vision embeddings: fractional patch coordinates into equal buckets."""
    boundaries = torch.arange(1 / 8, 1.0, 1 / 8)
    coords = torch.arange(0, 1 - 1e-6, 1 / 5)
    check(lambda a, bd: torch.bucketize(a, bd, right=True), coords, boundaries, grad=False)

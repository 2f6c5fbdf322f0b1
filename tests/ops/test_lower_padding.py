"""Reflection / replication padding lowerings (csrc/lower/padding.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [
    ((2, 3, 7), (2, 3)),
    ((3, 6), (1, 0)),
    ((2, 2, 5, 6), (1, 2, 3, 0)),
    ((2, 5, 4), (3, 3, 1, 2)),
    ((1, 2, 3, 4, 5), (1, 2, 0, 1, 2, 1)),
])
def test_pad(mode, shape, pad):
    check(lambda x: F.pad(x, pad, mode=mode), torch.randn(shape))


def test_replicate_negative_pad():
    check(lambda x: F.pad(x, (-1, 2, 1, -2), mode="replicate"), torch.randn(2, 3, 5, 6))


def test_pad_non_contiguous():
    x = torch.randn(2, 6, 5, 3).permute(0, 3, 1, 2)
    check(lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), x)

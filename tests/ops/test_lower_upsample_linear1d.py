"""upsample_linear1d and its backward (csrc/lower/upsample_linear1d.cc) against PyTorch CPU,
in both execution modes, with nothing falling back to the CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [3, 7, 16])
def test_interpolate_linear_size(align, size):
    check(lambda a: F.interpolate(a, size=size, mode="linear", align_corners=align), torch.randn(2, 3, 7))


@pytest.mark.parametrize("scale", [0.5, 2.0, 1.7])
def test_interpolate_linear_scale_factor(scale):
    check(lambda a: F.interpolate(a, scale_factor=scale, mode="linear"), torch.randn(1, 2, 9))
    check(lambda a: F.interpolate(a, scale_factor=scale, mode="linear", recompute_scale_factor=True),
          torch.randn(1, 2, 9))


def test_interpolate_linear_bfloat16():
    check(lambda a: F.interpolate(a, size=11, mode="linear"), torch.randn(2, 2, 5).bfloat16(),
          atol=2e-2, rtol=2e-2)


def test_sam_style_relative_position_resize():
    """SAM's get_rel_pos: a [L, C] table resized along L as [1, C, L] -> [1, C, 2 * size - 1]."""
    table = torch.randn(13, 8)
    check(lambda t: F.interpolate(t.reshape(1, 13, -1).permute(0, 2, 1), size=27, mode="linear")
          .reshape(-1, 27).permute(1, 0), table)

"""upsample_bicubic2d and its backward (csrc/lower/upsample_bicubic2d.cc) against PyTorch CPU,
in both execution modes, with nothing falling back to the CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("size", [(3, 5), (8, 8), (13, 6)])
def test_interpolate_bicubic_size(align, size):
    check(lambda a: F.interpolate(a, size=size, mode="bicubic", align_corners=align),
          torch.randn(2, 3, 6, 7), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scale", [0.5, 2.0, 1.7])
def test_interpolate_bicubic_scale_factor(scale):
    x = torch.randn(1, 2, 9, 5)
    check(lambda a: F.interpolate(a, scale_factor=scale, mode="bicubic"), x, atol=1e-5, rtol=1e-5)
    check(lambda a: F.interpolate(a, scale_factor=scale, mode="bicubic", recompute_scale_factor=True),
          x, atol=1e-5, rtol=1e-5)


def test_interpolate_bicubic_bfloat16():
    check(lambda a: F.interpolate(a, size=(7, 9), mode="bicubic"), torch.randn(1, 2, 4, 5).bfloat16(),
          atol=3e-2, rtol=3e-2)


def test_vit_position_embedding_resize():
    """ViTDet / YOLOS: a [1, H*W, C] position table reshaped to [1, C, H, W] and resized."""
    pos = torch.randn(1, 16, 8)
    check(lambda p: F.interpolate(p.reshape(1, 4, 4, 8).permute(0, 3, 1, 2), size=(6, 3),
                                  mode="bicubic", align_corners=False).flatten(2).transpose(1, 2),
          pos, atol=1e-5, rtol=1e-5)


def test_bicubic_bad_input():
    with pytest.raises((RuntimeError, ValueError, NotImplementedError)):
        F.interpolate(torch.randn(2, 3, 4, device="tpu"), size=(3, 3), mode="bicubic")

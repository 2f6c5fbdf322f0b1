"""Convolution lowerings (csrc/lower/conv.cc: convolution_overrideable and its
backward) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)


@pytest.mark.parametrize("cfg", [
    dict(n=2, cin=3, cout=4, k=3, stride=1, padding=1, dilation=1, groups=1, size=8),
    dict(n=1, cin=4, cout=6, k=3, stride=2, padding=0, dilation=1, groups=2, size=9),
    dict(n=2, cin=4, cout=4, k=3, stride=1, padding=2, dilation=2, groups=4, size=7),
    dict(n=1, cin=2, cout=3, k=2, stride=3, padding=1, dilation=1, groups=1, size=8),
])
def test_conv2d(cfg):
    x = torch.randn(cfg["n"], cfg["cin"], cfg["size"], cfg["size"] + 1)
    w = torch.randn(cfg["cout"], cfg["cin"] // cfg["groups"], cfg["k"], cfg["k"])
    b = torch.randn(cfg["cout"])
    check(lambda x, w, b: F.conv2d(x, w, b, cfg["stride"], cfg["padding"], cfg["dilation"], cfg["groups"]),
          x, w, b, atol=1e-4)


def test_conv2d_no_bias_non_contiguous():
    x = torch.randn(2, 8, 8, 3).permute(0, 3, 1, 2)  # channels-last memory
    w = torch.randn(4, 3, 3, 3)
    check(lambda x, w: F.conv2d(x, w, None, 1, 1), x, w, atol=1e-4)


def test_conv1d_and_conv3d():
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1), torch.randn(2, 3, 11),
          torch.randn(5, 3, 3), torch.randn(5), atol=1e-4)
    check(lambda x, w: F.conv3d(x, w, None, padding=1), torch.randn(1, 2, 4, 5, 4),
          torch.randn(3, 2, 3, 3, 3), atol=1e-4)


@pytest.mark.parametrize("cfg", [
    dict(cin=3, cout=4, k=3, stride=2, padding=1, output_padding=1, groups=1, dilation=1),
    dict(cin=4, cout=2, k=2, stride=2, padding=0, output_padding=0, groups=2, dilation=1),
    dict(cin=2, cout=3, k=3, stride=1, padding=1, output_padding=0, groups=1, dilation=2),
])
def test_conv_transpose2d(cfg):
    x = torch.randn(2, cfg["cin"], 5, 6)
    w = torch.randn(cfg["cin"], cfg["cout"] // cfg["groups"], cfg["k"], cfg["k"])
    b = torch.randn(cfg["cout"])
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, cfg["stride"], cfg["padding"], cfg["output_padding"],
                                             cfg["groups"], cfg["dilation"]), x, w, b, atol=1e-4)


def test_conv_transpose1d():
    check(lambda x, w: F.conv_transpose1d(x, w, None, stride=3, padding=1), torch.randn(2, 3, 7),
          torch.randn(3, 2, 4), atol=1e-4)


def test_conv2d_bf16_forward():
    x = torch.randn(2, 3, 8, 8).bfloat16()
    w = torch.randn(4, 3, 3, 3).bfloat16()
    check(lambda x, w: F.conv2d(x, w, None, 1, 1), x, w, grad=False, atol=5e-2, rtol=2e-2)


def test_transposed_conv_grad_with_output_padding_at_least_the_stride():
    # output_padding may reach the stride when it stays below the dilation; the
    # extra output rows then map past the input and must not widen its gradient.
    x = torch.randn(2, 2, 4, 4)
    w = torch.randn(2, 2, 4, 5)
    check(lambda a, k: F.conv_transpose2d(a, k, stride=(3, 2), padding=(1, 2), output_padding=(2, 3),
                                          groups=2, dilation=(4, 4)), x, w, atol=1e-4, rtol=1e-4)


def test_conv2d_bf16_bias_grad_accumulates_in_float32():
    # The bias gradient sums grad_output over batch and positions (8 * 32 * 32 =
    # 8192 terms here): PyTorch's CPU convolution accumulates a bfloat16 sum in
    # float32 and rounds once; summing in bfloat16 drifts by several ulps.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 2, 32, 32, generator=g).bfloat16()
    w = torch.randn(3, 2, 3, 3, generator=g).bfloat16()
    b = torch.randn(3, generator=g).bfloat16()
    gy = (torch.rand(8, 3, 32, 32, generator=g) + 0.5).bfloat16()
    grads = []
    for dev in ("cpu", "tpu"):
        bias = b.to(dev).detach().requires_grad_()
        F.conv2d(x.to(dev), w.to(dev), bias, padding=1).backward(gy.to(dev))
        grads.append(bias.grad)
    exact = gy.double().sum((0, 2, 3))
    assert grads[1].dtype == torch.bfloat16
    # One rounding of the float32 sum: within one bfloat16 ulp (2**-7 relative) of the exact sum.
    torch.testing.assert_close(grads[1].cpu().double(), exact, rtol=2 ** -7, atol=0)
    torch.testing.assert_close(grads[1].cpu(), grads[0], rtol=2 ** -7, atol=0)

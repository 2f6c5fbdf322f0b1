"""polar (csrc/lower/polar.cc) against PyTorch CPU, in both execution modes, with nothing
falling back to the CPU."""
import pytest
import torch

from lower_check import check


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_polar(dtype):
    r = torch.rand(4, 5, dtype=dtype) + 0.1
    theta = torch.randn(4, 5, dtype=dtype) * 3
    check(torch.polar, r, theta, grad=False)


def test_polar_broadcast_and_gradient():
    r, theta = torch.rand(3, 1) + 0.5, torch.randn(1, 4)
    check(lambda a, b: torch.view_as_real(torch.polar(a, b)), r, theta)


def test_polar_out():
    r, theta = torch.rand(6), torch.randn(6)
    check(lambda a, b: torch.polar(a, b, out=torch.empty(6, dtype=torch.complex64, device=a.device)),
          r, theta, grad=False)


def test_polar_bad_dtypes():
    with pytest.raises(RuntimeError, match="polar"):
        torch.polar(torch.rand(3, device="tpu"), torch.rand(3, dtype=torch.float64, device="tpu"))
    with pytest.raises((RuntimeError, AssertionError), match="floating point|polar"):
        torch.polar(torch.ones(3, dtype=torch.int64, device="tpu"), torch.ones(3, dtype=torch.int64,
                                                                                  device="tpu"))

"""Elementwise math lowerings (csrc/lower/math.cc), reductions' prod, factories'
eye against PyTorch CPU."""
import pytest
import torch

from conftest import assert_close_cpu
from lower_check import check

torch.manual_seed(0)
X = torch.randn(4, 5) * 2
U = torch.rand(4, 5) * 1.8 - 0.9  # inside (-1, 1)


@pytest.mark.parametrize("fn,x", [
    (torch.asin, U), (torch.acos, U), (torch.atan, X), (torch.sinh, X), (torch.cosh, X),
    (torch.asinh, X), (torch.acosh, X.abs() + 1.01), (torch.atanh, U), (torch.erfc, X),
    (torch.erfinv, U), (torch.lgamma, X.abs() + 0.1), (torch.digamma, X.abs() + 0.1),
    (torch.exp2, X), (torch.frac, X),
], ids=lambda v: getattr(v, "__name__", ""))
def test_unary(fn, x):
    check(fn, x, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fn", [torch.logaddexp, torch.logaddexp2, torch.copysign, torch.fmax, torch.fmin,
                                torch.hypot, torch.xlogy, torch.floor_divide],
                         ids=lambda f: f.__name__)
def test_binary(fn):
    y = torch.randn(4, 5)
    y[0, 0] = 0.0
    x = X.clone()
    x[1, 1] = 0.0
    grad = fn not in (torch.floor_divide, torch.fmax, torch.fmin)
    check(fn, x, y.abs() + 0.5 if fn is torch.xlogy else y, grad=grad, atol=1e-5, rtol=1e-4)


def test_nan_handling():
    x = torch.tensor([float("nan"), 1.0, -float("inf"), float("inf"), 2.0])
    y = torch.tensor([0.5, float("nan"), -float("inf"), float("inf"), -0.0])
    for fn in (torch.fmax, torch.fmin, torch.logaddexp, torch.copysign, torch.heaviside, torch.nextafter):
        check(fn, x, y, grad=False, equal_nan=True)
    check(torch.nan_to_num, x, grad=False)
    check(lambda x: torch.nan_to_num(x, nan=1.5, posinf=7.0, neginf=-3.0), x, grad=False)
    check(torch.signbit, torch.tensor([-0.0, 0.0, -1.0, 2.0]), grad=False)


def test_integer_ops():
    a = torch.tensor([7, -7, 5, -5, 0, 9])
    b = torch.tensor([2, 2, -3, -3, 4, 0]).clamp(min=1) * torch.tensor([1, 1, -1, -1, 1, 1])
    check(torch.floor_divide, a, b, grad=False)
    check(torch.fmax, a, b, grad=False)
    s = torch.tensor([0, 1, 3, 63, 64, -1])
    check(torch.bitwise_left_shift, a, s.clamp(0, 62), grad=False)
    check(torch.bitwise_right_shift, a, s.clamp(0, 62), grad=False)


def test_prod():
    x = torch.rand(3, 4) + 0.5
    check(torch.prod, x)
    check(lambda x: torch.prod(x, 1), x)
    check(lambda x: torch.prod(x, 0, keepdim=True), x)
    check(torch.prod, torch.tensor([[1, 2], [3, -4]]), grad=False)
    check(lambda x: torch.prod(x, 0), torch.tensor([[True, False], [True, True]]), grad=False)


def test_eye():
    from lower_check import torch_tpu
    torch_tpu.debug.reset_metrics()
    for args in ((3,), (2, 4), (4, 2)):
        for dt in (torch.float32, torch.int64, torch.bool):
            out = torch.eye(*args, dtype=dt, device="tpu")
            assert out.device.type == "tpu"
            torch.testing.assert_close(out.cpu(), torch.eye(*args, dtype=dt))
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == 0


def test_sgn_backward_uses_no_fallback():
    check(torch.sgn, X)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_over_negative_and_positive_x(n):
    # Negative non-integer x goes through the reflection formula; 0 is the pole.
    x = torch.tensor([-8.47, -3.7, -0.5, -0.01, 0.0, 0.3, 2.5, 8.4])
    check(lambda t: torch.polygamma(n, t), x, grad=False, rtol=1e-4, atol=1e-5)
    check(lambda t: torch.polygamma(n, t), x[x != 0], grad=True, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("start,end,steps", [(0, 1, 5), (-3.5, 7.25, 11), (2, -2, 2), (1, 1, 1), (0, 1, 0)])
def test_linspace_and_logspace_on_device(start, end, steps):
    # Start/end/base are runtime values: the same program serves other endpoints.
    for dtype in (torch.float32, torch.float64):
        assert_close_cpu(torch.linspace(start, end, steps, dtype=dtype, device="tpu"),
                         torch.linspace(start, end, steps, dtype=dtype))
        assert_close_cpu(torch.logspace(start, end, steps, base=2.0, dtype=dtype, device="tpu"),
                         torch.logspace(start, end, steps, base=2.0, dtype=dtype), rtol=1e-5, atol=1e-6)
    assert_close_cpu(torch.linspace(start, end, steps, device="tpu").to(torch.int64),
                     torch.linspace(start, end, steps).to(torch.int64))

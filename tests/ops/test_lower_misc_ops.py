"""Lowerings that used to fall back to the CPU: nll_loss2d (losses on 4-D input),
aminmax, vdot, addbmm, equal, isin, linalg.cross, frexp, the Bessel i0 family
(misc_math.cc, linalg.cc, nn.cc), the exponential / cauchy / geometric /
log_normal samplers (distributions.cc), median / nanmedian and masked_scatter
(order_stats.cc). Deterministic ops are compared with PyTorch CPU; random ops
by their distribution and by seed determinism."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from lower_check import check

torch.manual_seed(0)
NAN = float("nan")


def _no_fallback():
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]


# ---- nll_loss2d ---------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_4d(reduction, weighted):
    x = torch.randn(2, 5, 3, 4)
    t = torch.randint(0, 5, (2, 3, 4))
    t[0, 1, 2] = -100  # the default ignore_index
    w = torch.rand(5) + 0.5 if weighted else None
    on = lambda w, x: None if w is None else w.to(x.device)  # noqa: E731  (no weight gradient)
    check(lambda x, t: F.cross_entropy(x, t, weight=on(w, x), reduction=reduction), x, t, atol=1e-5)
    check(lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, weight=on(w, x), reduction=reduction,
                                  ignore_index=2), x, t.clamp(min=0), atol=1e-5)


def test_nll_loss_4d_bfloat16():
    x = torch.randn(2, 4, 3, 3).to(torch.bfloat16)
    t = torch.randint(0, 4, (2, 3, 3))
    check(F.nll_loss, x, t)


# ---- misc math -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_aminmax(dtype):
    x = (torch.randn(4, 5) * 10).to(dtype)
    check(lambda x: torch.aminmax(x), x, grad=False)
    check(lambda x: torch.aminmax(x, dim=1), x, grad=False)
    check(lambda x: torch.aminmax(x, dim=0, keepdim=True), x, grad=False)
    check(lambda x: torch.aminmax(x, keepdim=True), x, grad=False)


def test_aminmax_nan_and_bool():
    x = torch.tensor([[1.0, NAN, -2.0], [3.0, 0.5, 4.0]])
    check(lambda x: torch.aminmax(x, dim=1), x, grad=False, equal_nan=True)
    check(lambda x: torch.aminmax(x), x, grad=False, equal_nan=True)
    b = torch.tensor([[True, False], [True, True]])
    check(lambda x: torch.aminmax(x, dim=1), b, grad=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.complex64])
def test_vdot(dtype):
    a, b = torch.randn(7, dtype=torch.complex64 if dtype.is_complex else torch.float32) * 3, \
        torch.randn(7, dtype=torch.complex64 if dtype.is_complex else torch.float32) * 3
    check(torch.vdot, a.to(dtype), b.to(dtype), grad=not dtype.is_complex, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_addbmm(dtype):
    s, b1, b2 = torch.randn(3, 5), torch.randn(4, 3, 2), torch.randn(4, 2, 5)
    to = lambda *t: [(x * 4).to(dtype) for x in t]  # noqa: E731
    tol = dict(atol=5e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5)
    check(lambda s, p, q: torch.addbmm(s, p, q), *to(s, b1, b2), **tol)
    check(lambda s, p, q: torch.addbmm(s, p, q, beta=2, alpha=3), *to(s[0], b1, b2), **tol)
    # beta == 0 ignores NaN in self.
    if dtype != torch.int64:
        check(lambda s, p, q: torch.addbmm(s, p, q, beta=0), torch.full((3, 5), NAN).to(dtype),
              *to(b1, b2), grad=False, **tol)


def test_equal():
    torch_tpu.debug.reset_metrics()
    a = torch.randn(3, 4)
    t = a.to("tpu")
    assert torch.equal(t, a.clone().to("tpu")) is True
    b = a.clone()
    b[1, 2] += 1
    assert torch.equal(t, b.to("tpu")) is False
    assert torch.equal(t, a[:2].to("tpu")) is False
    n = torch.tensor([1.0, NAN]).to("tpu")
    assert torch.equal(n, n) is False
    assert torch.equal(torch.ones(3, device="tpu"), torch.ones(3, dtype=torch.int64, device="tpu"))
    assert torch.equal(torch.arange(6, device="tpu").view(2, 3).t(), torch.arange(6).view(2, 3).t().to("tpu"))
    _no_fallback()


def test_equal_device_mismatch():
    with pytest.raises(RuntimeError, match="same device"):
        torch.equal(torch.ones(2, device="tpu"), torch.ones(2))


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    e = torch.randint(0, 10, (4, 5))
    s = torch.tensor([1, 3, 3, 7])
    check(lambda e, s: torch.isin(e, s, invert=invert), e, s)
    check(lambda e, s: torch.isin(e, s, invert=invert), e.float(), s.float() + 0.5)
    check(lambda e, s: torch.isin(e, s, invert=invert), e, s.float())
    check(lambda e: torch.isin(e, 3, invert=invert), e)
    check(lambda s: torch.isin(3, s, invert=invert), s)
    check(lambda e, s: torch.isin(e, s, invert=invert), e, s[:0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_cross(dtype):
    a, b = (torch.randn(4, 3, 2) * 5).to(dtype), (torch.randn(4, 3, 2) * 5).to(dtype)
    check(lambda a, b: torch.linalg.cross(a, b, dim=1), a, b)
    check(lambda a, b: torch.cross(a, b, dim=-2), a, b)
    c, d = (torch.randn(5, 3) * 5).to(dtype), (torch.randn(1, 3) * 5).to(dtype)
    check(torch.linalg.cross, c, d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_frexp(dtype):
    x = torch.cat([torch.randn(50) * 1000, torch.tensor([0.0, -0.0, 1.0, -0.5, 0.75, 1e-39, -3e-42,
                                                       float("inf"), -float("inf"), NAN])]).to(dtype)
    check(torch.frexp, x, grad=False, equal_nan=True)
    check(torch.frexp, (torch.randn(3, 4) * 100).to(dtype), atol=1e-5)  # mantissa gradient


@pytest.mark.parametrize("fn", [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e])
def test_bessel(fn):
    x = torch.cat([torch.linspace(-40, 40, 161), torch.tensor([0.0, 1e-3, 29.9, 30.0, 30.1, -75.0, 88.0, 91.0,
                                                             float("inf"), -float("inf"), NAN])])
    check(fn, x, grad=False, rtol=2e-5, atol=1e-6, equal_nan=True)
    check(fn, torch.randn(4, 5) * 3, rtol=2e-5, atol=1e-5)
    check(fn, torch.randn(20).to(torch.bfloat16) * 3, grad=False)
    check(fn, torch.randint(-10, 10, (10,)), grad=False, rtol=2e-5, atol=1e-6)
    check(fn, torch.linspace(-50, 50, 101, dtype=torch.float64), grad=False, rtol=1e-12, atol=1e-12)


# ---- random distributions ------------------------------------------------------

N = 200_000


def _sample(method, *args, dtype=torch.float32):
    torch_tpu.debug.reset_metrics()
    x = getattr(torch.empty(N, device="tpu", dtype=dtype), method)(*args).cpu()
    _no_fallback()
    return x.double()


def test_exponential():
    x = _sample("exponential_", 2.0)
    assert x.min() >= 0
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.var() - 0.25) < 0.01


def test_cauchy():
    x = _sample("cauchy_", 1.0, 2.0)
    # Cauchy has no mean: check its median and quartiles (median +- sigma).
    q = torch.quantile(x[:100_000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    torch.testing.assert_close(q, torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.05, rtol=0)


def test_geometric():
    x = _sample("geometric_", 0.25)
    assert x.min() >= 1 and (x == x.round()).all()
    assert abs(x.mean() - 4.0) < 0.05 and abs(x.var() - 12.0) < 0.5
    y = _sample("geometric_", 0.5, dtype=torch.int64)
    assert abs(y.mean() - 2.0) < 0.03


def test_log_normal():
    x = _sample("log_normal_", 0.5, 0.5)
    assert x.min() > 0
    lx = x.log()
    assert abs(lx.mean() - 0.5) < 0.01 and abs(lx.std() - 0.5) < 0.01
    assert abs(x.mean() - math.exp(0.5 + 0.125)) < 0.02


def test_distributions_bfloat16():
    x = _sample("exponential_", 1.0, dtype=torch.bfloat16)
    assert abs(x.mean() - 1.0) < 0.03


@pytest.mark.parametrize("method,args", [("exponential_", (1.5,)), ("cauchy_", (0.0, 1.0)),
                                         ("geometric_", (0.3,)), ("log_normal_", (1.0, 2.0))])
def test_same_seed_same_numbers(method, args):
    def draw():
        torch.manual_seed(7)
        a = getattr(torch.empty(100, device="tpu"), method)(*args).cpu()
        g = torch.Generator(device="tpu").manual_seed(11)
        b = getattr(torch.empty(100, device="tpu"), method)(*args, generator=g).cpu()
        return a, b
    (a1, b1), (a2, b2) = draw(), draw()
    assert torch.equal(a1, a2) and torch.equal(b1, b2)
    assert not torch.equal(a1, b1)


@pytest.mark.parametrize("method,args", [("exponential_", (1.5,)), ("cauchy_", (0.0, 1.0)),
                                         ("geometric_", (0.3,)), ("log_normal_", (1.0, 2.0))])
def test_same_numbers_in_both_modes(method, args):
    was = torch_tpu.get_execution_mode()
    got = []
    try:
        for mode in ("strict_eager", "defer_and_fuse"):
            torch_tpu.set_execution_mode(mode)
            torch.manual_seed(3)
            got.append(getattr(torch.empty(64, device="tpu"), method)(*args).cpu())
    finally:
        torch_tpu.set_execution_mode(was)
    assert torch.equal(got[0], got[1])


def test_distribution_argument_checks():
    x = torch.empty(3, device="tpu")
    for bad in (lambda: x.exponential_(-1.0), lambda: x.geometric_(1.5),
                lambda: x.log_normal_(0.0, -1.0), lambda: x.cauchy_(0.0, -1.0)):
        with pytest.raises(RuntimeError, match="expects"):
            bad()


# ---- median / masked_scatter -----------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_median(dtype):
    x = (torch.randn(4, 7) * 5).to(dtype)
    for fn in (torch.median, torch.nanmedian):
        check(fn, x)
        check(lambda x: fn(x, 1), x)
        check(lambda x: fn(x, 0, keepdim=True), x)
        check(lambda x: fn(x, -1), x[:, :6])  # even length: the lower median


def test_median_ties_and_nan():
    ties = torch.tensor([[3, 1, 2, 1, 3, 2, 2, 1], [5, 5, 5, 5, 1, 1, 1, 1]])
    check(lambda x: torch.median(x, 1), ties)
    x = torch.tensor([[1.0, NAN, 0.0, NAN, 2.0], [2.0, 1.0, 0.0, 5.0, 3.0], [NAN, 4.0, 1.0, 2.0, 3.0]])
    check(lambda x: torch.median(x, 1), x, grad=False, equal_nan=True)
    check(lambda x: torch.nanmedian(x, 1), x, equal_nan=True)
    check(torch.median, x, grad=False, equal_nan=True)
    check(torch.nanmedian, x, equal_nan=True)
    check(lambda x: torch.median(x, 0), torch.tensor(2.5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_masked_scatter(dtype):
    x = (torch.randn(3, 4) * 5).to(dtype)
    mask = torch.rand(3, 4) > 0.5
    src = (torch.randn(4, 4) * 5).to(dtype)
    check(lambda x, m, s: x.masked_scatter(m, s), x, mask, src)
    check(lambda x, m, s: x.masked_scatter(m[0], s), x, mask, src)  # mask broadcasts
    check(lambda x, m, s: x.clone().masked_scatter_(m, s), x, mask, src)
    check(lambda x, m, s: x.masked_scatter(m, s), x, torch.zeros(3, 4, dtype=torch.bool), src)

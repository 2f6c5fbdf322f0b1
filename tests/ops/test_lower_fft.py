"""FFT lowerings (csrc/lower/fft.cc: _fft_r2c, _fft_c2r, _fft_c2c) against PyTorch CPU.

Complex results are compared directly (forward only: check()'s weighted-sum
backward needs real outputs); gradients go through real-valued compositions
(|fft|, irfft(rfft), hfft) so every primitive's backward runs on tpu too."""
import pytest
import torch

import torch_tpu
from lower_check import check

torch.manual_seed(0)
X = torch.randn(4, 6, 5)
XC = torch.randn(4, 6, 5, dtype=torch.complex64)
NORMS = ["backward", "ortho", "forward"]
# FFT sums grow with the signal length: compare with a relative and a small absolute slack.
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.complex64: dict(atol=1e-4, rtol=1e-4),
       torch.float64: dict(atol=1e-10, rtol=1e-10), torch.complex128: dict(atol=1e-10, rtol=1e-10)}


def _inputs(dtype):
    return X.to(dtype) if not dtype.is_complex else XC.to(dtype)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("n,dim", [(None, -1), (8, 1), (3, 0), (5, -1)])
def test_fft_ifft(norm, dtype, n, dim):
    check(lambda x: (torch.fft.fft(x, n=n, dim=dim, norm=norm), torch.fft.ifft(x, n=n, dim=dim, norm=norm)),
          _inputs(dtype), grad=False, **TOL[dtype])


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n,dim", [(None, -1), (8, 1), (3, 0), (7, -1)])
def test_rfft_ihfft(norm, dtype, n, dim):
    check(lambda x: (torch.fft.rfft(x, n=n, dim=dim, norm=norm), torch.fft.ihfft(x, n=n, dim=dim, norm=norm)),
          _inputs(dtype), grad=False, **TOL[dtype])


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("n,dim", [(None, -1), (8, 1), (3, 0), (9, -1)])
def test_irfft_hfft(norm, dtype, n, dim):
    # Inputs that are not Hermitian (non-zero imaginary DC/Nyquist bins) must
    # be treated as PyTorch does: those imaginary parts are ignored.
    check(lambda x: (torch.fft.irfft(x, n=n, dim=dim, norm=norm), torch.fft.hfft(x, n=n, dim=dim, norm=norm)),
          _inputs(dtype), grad=False, **TOL[dtype])


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("s,dim", [(None, None), ((4, 8), (0, 2)), ((3, 7), (-1, 1)), (None, (1,))])
def test_fftn_family(norm, dtype, s, dim):
    x = _inputs(dtype)
    fns = [torch.fft.fftn, torch.fft.ifftn]
    if not dtype.is_complex:
        fns += [torch.fft.rfftn, torch.fft.ihfftn]
    fns += [torch.fft.irfftn, torch.fft.hfftn]
    check(lambda t: [f(t, s=s, dim=dim, norm=norm) for f in fns], x, grad=False, **TOL[dtype])


@pytest.mark.parametrize("norm", NORMS)
def test_fft2_rfft2_irfft2(norm):
    check(lambda x: (torch.fft.fft2(x, norm=norm), torch.fft.ifft2(x, s=(5, 4), norm=norm),
                     torch.fft.rfft2(x, norm=norm), torch.fft.irfft2(x, norm=norm),
                     torch.fft.hfft2(x, norm=norm), torch.fft.ihfft2(x, norm=norm)), X, grad=False, **TOL[X.dtype])


def test_many_dims_run_in_chunks():
    # stablehlo.fft takes at most three dims; five transformed dims run in two steps.
    x = torch.randn(3, 2, 4, 3, 5, 2)
    xc = torch.randn(3, 2, 4, 3, 5, 2, dtype=torch.complex64)
    dims = (0, 1, 2, 4, 5)
    check(lambda t: (torch.fft.fftn(t, dim=dims), torch.fft.rfftn(t, dim=dims),
                     torch.fft.fftn(t, dim=dims[::-1], norm="ortho")), x, grad=False, **TOL[x.dtype])
    check(lambda t: (torch.fft.ifftn(t, dim=dims), torch.fft.irfftn(t, dim=dims, norm="forward")),
          xc, grad=False, **TOL[xc.dtype])


def test_onesided_false_full_spectrum():
    # fft of a real input is _fft_r2c(onesided=False): the upper half is the
    # conjugate of the reflected lower half over every transformed dim.
    for shape, dims in [((6, 7), (0, 1)), ((5, 8), (1,)), ((3, 4, 5), (0, 2)), ((1,), (0,))]:
        check(lambda t: torch.fft.fftn(t, dim=dims), torch.randn(shape), grad=False, **TOL[torch.float32])


# Gradients that reach a real (float) leaf end in at::real(complex grad), which
# PyTorch implements with the view op aten::view_as_real. That view has no tpu
# kernel yet (a dtype-changing view: it needs the view machinery, not a
# lowering), so it runs on the CPU; these checks allow exactly that fallback.
# Gradients to complex leaves need no view and must not fall back at all.
VIEW_AS_REAL = {"aten::view_as_real"}


def grad_check(fn, x, allowed=frozenset(), **tol):
    """fn(x) (a real tensor) on CPU vs tpu: value and d/dx of sum(fn(x) * w)."""
    w = torch.randn(fn(x).shape, generator=torch.Generator().manual_seed(1))
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    torch_tpu.debug.reset_metrics()
    yt = fn(xt)
    (yt * w.to("tpu")).sum().backward()
    yc = fn(xc)
    (yc * w).sum().backward()
    torch.testing.assert_close(yt.detach().cpu(), yc.detach(), **tol)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, **tol)
    fallbacks = set(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    assert fallbacks <= set(allowed), f"ops fell back to the CPU: {fallbacks - set(allowed)}"


REAL_LEAF_GRADS = {
    "fft_abs": lambda x, norm: torch.fft.fft(x, n=7, norm=norm).abs(),
    "ifft_abs": lambda x, norm: torch.fft.ifft(x, dim=1, norm=norm).abs(),
    "rfft_abs": lambda x, norm: torch.fft.rfft(x, n=8, dim=0, norm=norm).abs(),
    "irfft_rfft": lambda x, norm: torch.fft.irfft(torch.fft.rfft(x, norm=norm) * 1.5, n=6, norm=norm),
    "hfft": lambda x, norm: torch.fft.hfft(x, n=9, dim=1, norm=norm),
    "ihfft_abs": lambda x, norm: torch.fft.ihfft(x, dim=1, norm=norm).abs(),
    "fftn_abs": lambda x, norm: torch.fft.fftn(x, s=(4, 8), dim=(0, 2), norm=norm).abs(),
    "irfftn_rfftn": lambda x, norm: torch.fft.irfftn(torch.fft.rfftn(x, norm=norm), s=(6, 5), dim=(1, 2),
                                                     norm=norm),
    "fft2_abs": lambda x, norm: torch.fft.fft2(x, norm=norm).abs(),
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", list(REAL_LEAF_GRADS))
def test_gradients_float32(norm, name):
    grad_check(lambda x: REAL_LEAF_GRADS[name](x, norm), X, allowed=VIEW_AS_REAL, **TOL[torch.float32])


COMPLEX_LEAF_GRADS = {
    # c2c forward and inverse, c2r (irfft, hfft), and r2c inside c2r's backward.
    "fft_abs": lambda z, norm: torch.fft.fft(z, n=7, dim=1, norm=norm).abs(),
    "ifftn_abs": lambda z, norm: torch.fft.ifftn(z, s=(3, 8), dim=(0, 2), norm=norm).abs(),
    "irfft": lambda z, norm: torch.fft.irfft(z, n=9, norm=norm),
    "irfftn": lambda z, norm: torch.fft.irfftn(z, s=(5, 6), dim=(0, 1), norm=norm),
    "hfft": lambda z, norm: torch.fft.hfft(z, n=8, dim=1, norm=norm),
    "fft_then_irfft": lambda z, norm: torch.fft.irfft(torch.fft.fft(z, dim=0, norm=norm), n=9, norm=norm),
}


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name", list(COMPLEX_LEAF_GRADS))
def test_gradients_complex64_leaf(norm, name):
    # Real-valued outputs, so sum(out * w) is a real loss; no fallback allowed.
    grad_check(lambda z: COMPLEX_LEAF_GRADS[name](z, norm), XC, **TOL[torch.complex64])


def test_empty_batch_and_errors():
    # (PyTorch's CPU FFT rejects empty batches, so only shapes and dtypes are compared.)
    x = torch.randn(0, 8, device="tpu")
    for y, shape, dtype in [(torch.fft.fft(x), (0, 8), torch.complex64),
                            (torch.fft.rfft(x), (0, 5), torch.complex64),
                            (torch.fft.irfft(torch.fft.rfft(x)), (0, 8), torch.float32)]:
        assert y.device.type == "tpu" and y.shape == shape and y.dtype == dtype
        assert y.cpu().shape == shape
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.randn(4, device="tpu"), n=0)
    with pytest.raises((TypeError, RuntimeError), match="(?i)complex32|half|dtype"):
        torch.fft.rfft(torch.randn(8, device="tpu").half()).cpu()

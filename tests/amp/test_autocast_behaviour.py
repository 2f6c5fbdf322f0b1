"""torch.autocast("tpu") behaves as on CUDA: default dtype, nesting, decorator,
backward, the weight cache, the torch.tpu.amp spellings."""
import threading
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import assert_close_cpu


def test_default_dtype_is_bfloat16():
    assert torch.get_autocast_dtype("tpu") == torch.bfloat16
    a = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu"):
        assert torch.is_autocast_enabled("tpu")
        assert (a @ a).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("tpu")
    assert (a @ a).dtype == torch.float32


def test_supported_dtypes_are_the_ones_that_run():
    assert torch.tpu.is_bf16_supported()
    x = torch.randn(3, 8, device="tpu")
    lin = torch.nn.Linear(8, 2).to("tpu")
    for dtype in torch.tpu.get_amp_supported_dtype():
        with torch.autocast("tpu", dtype=dtype):
            assert lin(x).dtype == dtype
    # Anything else is refused the way PyTorch refuses it on other devices.
    with pytest.warns(UserWarning, match="not supported"):
        ctx = torch.autocast("tpu", dtype=torch.float64)
    with ctx:
        assert lin(x).dtype == torch.float32


def test_tpu_amp_aliases():
    from torch.tpu.amp import GradScaler, autocast

    a = torch.randn(4, 4, device="tpu")
    with autocast():
        assert (a @ a).dtype == torch.bfloat16
    with torch.tpu.amp.autocast(dtype=torch.float16):
        assert (a @ a).dtype == torch.float16
    with autocast(enabled=False):
        assert (a @ a).dtype == torch.float32
    assert isinstance(GradScaler(), torch.amp.GradScaler)
    assert GradScaler()._device == "tpu"


def test_alias_is_bfloat16_in_any_thread():
    # PyTorch keeps the autocast dtype per thread; the alias names it explicitly.
    seen = []

    def work():
        a = torch.randn(4, 4, device="tpu")
        with torch.tpu.amp.autocast():
            seen.append((a @ a).dtype)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [torch.bfloat16]


def test_nested_disabled_region():
    a = torch.randn(4, 4, device="tpu")
    with torch.autocast("tpu"):
        assert (a @ a).dtype == torch.bfloat16
        with torch.autocast("tpu", enabled=False):
            assert not torch.is_autocast_enabled("tpu")
            assert (a @ a).dtype == torch.float32
            with torch.autocast("tpu", dtype=torch.float16):
                assert (a @ a).dtype == torch.float16
        assert (a @ a).dtype == torch.bfloat16


def test_decorator_form():
    @torch.autocast("tpu")
    def f(x, y):
        return x @ y, torch.softmax(x, 0)

    a = torch.randn(4, 4, device="tpu")
    mm, sm = f(a, a)
    assert mm.dtype == torch.bfloat16
    assert sm.dtype == torch.float32
    assert (a @ a).dtype == torch.float32


def _linear_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_backward_of_an_autocast_forward(dtype):
    # Forward under autocast, backward outside (as CUDA's recipe): the gradients
    # are float32 like the parameters and match CPU autocast's.
    cpu = _linear_net()
    tpu = _linear_net().to("tpu")
    x = torch.randn(5, 8)
    with torch.autocast("cpu", dtype=dtype):
        ref = cpu(x).float().square().mean()
    with torch.autocast("tpu", dtype=dtype):
        out = tpu(x.to("tpu")).float().square().mean()
    ref.backward()
    out.backward()
    assert_close_cpu(out.detach(), ref.detach(), rtol=2e-2, atol=2e-2)
    for p, q in zip(tpu.parameters(), cpu.parameters()):
        assert p.grad.dtype == torch.float32
        assert_close_cpu(p.grad, q.grad, rtol=5e-2, atol=2e-2)


def test_autocast_inside_a_custom_backward():
    # custom_bwd runs backward under the forward's autocast state.
    seen = {}

    class MatMul(torch.autograd.Function):
        @staticmethod
        @torch.tpu.amp.custom_fwd
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a @ b

        @staticmethod
        @torch.tpu.amp.custom_bwd
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            seen["enabled"] = torch.is_autocast_enabled("tpu")
            ga, gb = g @ b.t(), a.t() @ g
            seen["dtype"] = ga.dtype
            return ga, gb

    a = torch.randn(4, 3, device="tpu", requires_grad=True)
    b = torch.randn(3, 5, device="tpu", requires_grad=True)
    with torch.autocast("tpu"):
        out = MatMul.apply(a, b)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert seen == {"enabled": True, "dtype": torch.bfloat16}
    assert a.grad.dtype == torch.float32  # autograd casts back to the input's dtype
    ref = torch.ones(4, 5).bfloat16() @ b.detach().cpu().bfloat16().t()
    assert_close_cpu(a.grad, ref.float())


class _CountCasts(TorchDispatchMode):
    """Counts the dtype casts autocast issues (they run below the autocast key)."""

    def __init__(self):
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.to.dtype):
            self.casts += 1
        return func(*args, **(kwargs or {}))


def _casts(device, cache_enabled, regions=1):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8).to(device)
    x = torch.randn(2, 8, device=device)
    with _CountCasts() as counter:
        for _ in range(regions):
            with torch.autocast(device, dtype=torch.bfloat16, cache_enabled=cache_enabled):
                lin(x)
                lin(x)
    return counter.casts


def test_weight_cache_casts_weights_once_per_region():
    # Two calls of one Linear: with the cache the weight and bias are cast once
    # (the input twice); without it, everything twice. CPU autocast agrees.
    cached, uncached = _casts("tpu", True), _casts("tpu", False)
    assert cached == _casts("cpu", True)
    assert uncached == _casts("cpu", False)
    assert uncached - cached == 2  # weight and bias, once each saved
    # Leaving the outermost region empties the cache: a second region casts again.
    assert _casts("tpu", True, regions=2) == 2 * cached
    torch.clear_autocast_cache()


def test_unsupported_autocast_dtype_warning_names_tpu():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.autocast("tpu", dtype=torch.int32)
    assert any("tpu" in str(x.message) for x in w)

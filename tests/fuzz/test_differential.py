"""Differential fuzzing: random chains of 2-6 ops over random shapes, dtypes, views
(slices, transposes, expands), in-place ops and out= forms run on tpu (Strict Eager,
Defer & Fuse, and torch.compile(backend="tpu") of the whole chain) and on the CPU,
and must agree.

CI runs a fixed, derandomised budget: 300 programs (120 per eager mode, 60 compiled;
a compiled program costs a Dynamo compile). Budgets per mode:
    TORCH_TPU_FUZZ_EXAMPLES=N            each eager mode
    TORCH_TPU_FUZZ_COMPILED_EXAMPLES=N   compiled
    TORCH_TPU_FUZZ_LONG=1                the long run: 20,000 programs
                                         (8,500 + 8,500 eager, 3,000 compiled)
e.g. TORCH_TPU_FUZZ_LONG=1 nice -n 15 python -m pytest tests/fuzz -q -k compiled
(hypothesis prints the smallest failing chain)."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_tpu
from torch_tpu import settings as tpu_settings

_LONG = tpu_settings.get("TORCH_TPU_FUZZ_LONG")
EXAMPLES = tpu_settings.get("TORCH_TPU_FUZZ_EXAMPLES") or (8500 if _LONG else 120)
COMPILED_EXAMPLES = tpu_settings.get("TORCH_TPU_FUZZ_COMPILED_EXAMPLES") or (3000 if _LONG else 60)


def _float_only(x):
    return x.is_floating_point()


# name -> (applies to x?, fn(x) -> tensor). Every fn works the same on both devices.
OPS = {
    "add": (None, lambda x: x + 2),
    "mul_t": (None, lambda x: x * x),
    "sub_rev": (None, lambda x: 3 - x),
    "neg": (lambda x: x.dtype != torch.bool, lambda x: -x),
    "abs": (lambda x: x.dtype != torch.bool, torch.abs),
    "relu": (lambda x: x.dtype != torch.bool, torch.relu),
    "exp": (_float_only, lambda x: torch.exp(x.clamp(-5, 5))),
    "tanh": (_float_only, torch.tanh),
    "sigmoid": (_float_only, torch.sigmoid),
    "sum0": (lambda x: x.dim() > 0, lambda x: x.sum(0)),
    "amax_last": (lambda x: x.dim() > 0 and x.numel() > 0, lambda x: x.amax(-1)),
    "cumsum": (lambda x: x.dim() > 0 and x.dtype != torch.bool, lambda x: x.cumsum(-1)),
    "where": (None, lambda x: torch.where(x > 0, x, torch.zeros_like(x))),
    "to_float": (None, lambda x: x.float()),
    # Rounded before the cast: truncation turns a last-bit difference into a whole
    # unit (the long run found XLA's tanh reaching 1.0 at x >= 8 where the CPU's
    # correctly rounded tanh gives 0.99999994 up to 9.01: 1 ulp, then 1 vs 0).
    "to_long": (lambda x: x.dtype != torch.bool, lambda x: x.clamp(-100, 100).round().long()),
    "gt": (None, lambda x: (x > 1)),
    "flatten": (None, lambda x: x.reshape(-1)),
    # views
    "slice": (lambda x: x.dim() > 0 and x.shape[0] > 1, lambda x: x[1:]),
    "step_slice": (lambda x: x.dim() > 0, lambda x: x[::2]),
    "transpose": (lambda x: x.dim() >= 2, lambda x: x.transpose(0, 1)),
    "expand": (lambda x: x.dim() >= 1 and x.shape[0] == 1, lambda x: x.expand(3, *x.shape[1:])),
    "unsqueeze_expand": (lambda x: x.dim() < 3, lambda x: x.unsqueeze(0).expand(2, *x.shape)),
    # in-place (on a fresh copy, through a view too) and out=
    "add_": (lambda x: x.dtype != torch.bool, lambda x: x.clone().add_(1)),
    "mul_view_": (lambda x: x.dim() > 0 and x.dtype != torch.bool,
                  lambda x: _inplace_through_view(x)),
    "clamp_": (lambda x: x.dtype != torch.bool, lambda x: x.clone().clamp_(-1, 1)),
    "add_out": (lambda x: x.dtype != torch.bool, lambda x: torch.add(x, x, out=torch.empty_like(x))),
    "mul_out_resize": (lambda x: x.dtype != torch.bool,
                       lambda x: torch.mul(x, 2, out=torch.empty(0, dtype=x.dtype, device=x.device))),
}


def _inplace_through_view(x):
    y = x.clone()
    y[0].mul_(3)
    return y


@st.composite
def programs(draw):
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from([torch.float32, torch.int64, torch.bool]))
    seed = draw(st.integers(0, 2**31 - 1))
    names = draw(st.lists(st.sampled_from(sorted(OPS)), min_size=2, max_size=6))
    return shape, dtype, seed, names


def _input(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.int64:
        return torch.randint(-6, 7, shape, generator=g)
    return torch.randn(shape, generator=g) * 3


def _run(x, names):
    applied = []
    for n in names:
        ok, fn = OPS[n]
        if ok is None or ok(x):
            x = fn(x)
            applied.append(n)
    return x, applied


def _compiled_run(names):
    """The chain as one torch.compile(backend="tpu") graph (a fresh Dynamo state
    per program: each chain is a different graph of the same code)."""
    torch._dynamo.reset()
    return torch.compile(lambda t: _run(t, names)[0], backend="tpu")


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse", "compiled"])
def test_differential_chains(mode):
    compiled = mode == "compiled"
    eager_mode = "strict_eager" if compiled else mode

    def on_tpu(x, names):
        with torch_tpu.execution_mode(eager_mode):
            if compiled:
                return _compiled_run(names)(x.to("tpu")).cpu()
            return _run(x.to("tpu"), names)[0].cpu()

    @settings(max_examples=COMPILED_EXAMPLES if compiled else EXAMPLES, derandomize=True,
              deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def check(p):
        ran[0] += 1
        shape, dtype, seed, names = p
        x = _input(shape, dtype, seed)
        try:
            ref, applied = _run(x.clone(), names)
        except Exception as e:  # noqa: BLE001  (the tpu must refuse the chain the same way)
            # (Dynamo re-raises a refusal met while tracing as its own error type,
            # a RuntimeError subclass; the eager modes raise the same type.)
            with pytest.raises(RuntimeError if compiled and isinstance(e, RuntimeError) else type(e)):
                on_tpu(x, names)
            return
        got = on_tpu(x, names)
        assert got.dtype == ref.dtype and got.shape == ref.shape, (applied, got.dtype, ref.dtype)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True,
                                   msg=lambda m: f"{mode} {shape} {dtype} {applied}: {m}")

    ran = [0]
    try:
        check()
    finally:
        # The long run's figure (pytest -s shows it): programs generated and compared.
        print(f"\nfuzz {mode}: {ran[0]} programs")
        if compiled:
            torch._dynamo.reset()

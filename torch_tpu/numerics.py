"""Numerics check: run every tpu op a second time on the CPU and report the first
op whose result differs beyond tolerance. This is how a wrong lowering is found in
a big model: each op is compared on the very inputs the tpu saw, so an error
upstream does not make every later op look wrong.

    with torch_tpu.debug.check_numerics():           # raises NumericsMismatch
        loss = model(x); loss.backward()

    TORCH_TPU_CHECK_NUMERICS=1 python train.py        # the same for the whole run
    TORCH_TPU_CHECK_NUMERICS=warn python train.py     # warn once, keep going

Slow by design (every op syncs and runs twice). Ops with random results and ops
that return uninitialised memory are not compared.
"""
import os
import traceback
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from . import settings

# Per dtype: XLA may fuse, reorder and use other algorithms (e.g. for matmul
# accumulation) than the CPU kernels, so allow more than CPU-vs-CPU.
DEFAULT_TOLERANCES = {
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

# Results that are not values (uninitialised memory) or that only observe.
_SKIP_PREFIXES = ("aten::empty", "aten::new_empty", "aten::_local_scalar_dense",
                  "aten::resize_", "aten::set_", "aten::record_stream")

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OUR_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class NumericsMismatch(RuntimeError):
    """A tpu op's result differs from the CPU's; `mismatch` has the details."""

    def __init__(self, mismatch):
        super().__init__(str(mismatch))
        self.mismatch = mismatch


class Mismatch:
    """One op whose tpu result differs from the CPU result."""

    def __init__(self, op, inputs, problem, stack):
        self.op = op            # "aten::add.Tensor"
        self.inputs = inputs    # ["Tensor(float32, [4, 8]) on tpu:0", "2.0", ...]
        self.problem = problem  # what differs, e.g. "output 0: max abs diff 1.0 ..."
        self.stack = stack      # traceback.StackSummary where the op was called

    def user_frames(self):
        """The stack without torch's and torch_tpu's own frames (all when none is left)."""
        mine = [f for f in self.stack
                if not f.filename.startswith(_TORCH_DIR) and not f.filename.startswith(_OUR_DIR)]
        return mine or list(self.stack)

    def __str__(self):
        lines = [f"torch_tpu numerics check: {self.op} on tpu differs from the CPU: {self.problem}",
                 "  inputs:"]
        lines += [f"    {d}" for d in self.inputs]
        lines.append("  called from (most recent call last):")
        for line in traceback.format_list(self.user_frames()):
            lines += ["    " + part for part in line.rstrip().splitlines()]
        return "\n".join(lines)


def _describe(x):
    if isinstance(x, torch.Tensor):
        return f"Tensor({str(x.dtype).replace('torch.', '')}, {list(x.shape)}) on {x.device}"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_describe(v) for v in x) + "]"
    return repr(x)


def _is_tpu(x):
    return (isinstance(x, torch.Tensor) and x.device.type == "tpu") or (
        isinstance(x, torch.device) and x.type == "tpu")


def _to_cpu(x):
    if isinstance(x, torch.Tensor) and x.device.type == "tpu":
        return x.detach().cpu()  # a copy: the tpu op may mutate its inputs afterwards
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("cpu")
    return x


class check_numerics(TorchDispatchMode):
    """Context manager: every op on tpu tensors is also run on CPU copies of its
    inputs; the first result (or mutated argument) that differs beyond tolerance
    raises NumericsMismatch naming the op, its inputs' shapes and dtypes and the
    Python stack (raise_on_mismatch=False: warns once and records every mismatch
    in `.mismatches`). rtol/atol override the per-dtype DEFAULT_TOLERANCES."""

    def __init__(self, raise_on_mismatch=True, rtol=None, atol=None):
        super().__init__()
        self.raise_on_mismatch = raise_on_mismatch
        self.rtol = rtol
        self.atol = atol
        self.mismatches = []
        self.checked = 0      # ops compared
        self.unchecked = 0    # ops the CPU could not run (reported nowhere else)

    @property
    def first_mismatch(self):
        return self.mismatches[0] if self.mismatches else None

    def _tolerance(self, dtype):
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return (rtol if self.rtol is None else self.rtol,
                atol if self.atol is None else self.atol)

    def _compare_tensor(self, got, want, what):
        got = got.detach().cpu()
        if got.shape != want.shape:
            return f"{what}: shape {list(got.shape)}, CPU gives {list(want.shape)}"
        if got.dtype != want.dtype:
            return f"{what}: dtype {got.dtype}, CPU gives {want.dtype}"
        if got.numel() == 0:
            return None
        if got.is_floating_point() or got.is_complex():
            rtol, atol = self._tolerance(got.dtype)
            if torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
                return None
            g, w = got.to(torch.complex128 if got.is_complex() else torch.float64), \
                want.to(torch.complex128 if want.is_complex() else torch.float64)
            diff = (g - w).abs()
            diff = torch.where(torch.isnan(g) & torch.isnan(w), torch.zeros_like(diff), diff)
            diff = torch.nan_to_num(diff, nan=float("inf"))
            i = int(diff.argmax())
            return (f"{what}: max abs diff {float(diff.flatten()[i]):.6g} at flat index {i} "
                    f"(tpu {g.flatten()[i].item():.6g}, CPU {w.flatten()[i].item():.6g}; "
                    f"rtol={rtol}, atol={atol})")
        if torch.equal(got, want):
            return None
        bad = int((got != want).flatten().nonzero()[0])
        return (f"{what}: differs at flat index {bad} (tpu {got.flatten()[bad].item()}, "
                f"CPU {want.flatten()[bad].item()})")

    def _compare(self, got, want, what):
        gs, _ = tree_flatten(got)
        ws, _ = tree_flatten(want)
        if len(gs) != len(ws):
            return f"{what}: {len(gs)} values, CPU gives {len(ws)}"
        for i, (g, w) in enumerate(zip(gs, ws)):
            label = what if len(gs) == 1 else f"{what}[{i}]"
            if isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor):
                problem = self._compare_tensor(g, w, label)
            elif isinstance(g, float) and isinstance(w, float):
                rtol, atol = self._tolerance(torch.float64)
                problem = None if abs(g - w) <= atol + rtol * abs(w) or g == w or (g != g and w != w) \
                    else f"{label}: {g} vs CPU {w}"
            else:
                problem = None if type(g) is not type(w) or g == w else f"{label}: {g!r} vs CPU {w!r}"
            if problem:
                return problem
        return None

    def _should_check(self, func, args, kwargs):
        name = func.name()
        if name.startswith(_SKIP_PREFIXES) or torch.Tag.nondeterministic_seeded in func.tags:
            return False
        flat, _ = tree_flatten((args, kwargs))
        return any(_is_tpu(x) for x in flat)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._should_check(func, args, kwargs):
            return func(*args, **kwargs)
        cpu_args, cpu_kwargs = tree_map(_to_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        try:
            ref = func(*cpu_args, **cpu_kwargs)
        except Exception:  # noqa: BLE001  (an op or dtype the CPU lacks: nothing to compare)
            self.unchecked += 1
            return out
        self.checked += 1
        problem = self._compare(out, ref, "output")
        if problem is None:
            # Mutated arguments that are not returned (out=, foreach in-place ops).
            returned = {id(t) for t in tree_flatten(out)[0]}
            for i, a in enumerate(func._schema.arguments):
                if a.alias_info is None or not a.alias_info.is_write:
                    continue
                got = kwargs.get(a.name) if a.kwarg_only or i >= len(args) else args[i]
                want = cpu_kwargs.get(a.name) if a.kwarg_only or i >= len(args) else cpu_args[i]
                if got is not None and want is not None and id(got) not in returned:
                    problem = self._compare(got, want, f"argument {a.name}")
                    if problem:
                        break
        if problem:
            self._report(func, args, kwargs, problem)
        return out

    def _report(self, func, args, kwargs, problem):
        inputs = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
        m = Mismatch(func.name(), inputs, problem, traceback.extract_stack()[:-2])
        self.mismatches.append(m)
        if self.raise_on_mismatch:
            raise NumericsMismatch(m)
        if len(self.mismatches) == 1:
            warnings.warn(str(m), stacklevel=3)


_global_mode = None


def enable(raise_on_mismatch=True, rtol=None, atol=None):
    """Checks every op from now on, in this thread (what TORCH_TPU_CHECK_NUMERICS does)."""
    global _global_mode
    disable()
    _global_mode = check_numerics(raise_on_mismatch, rtol, atol)
    _global_mode.__enter__()
    return _global_mode


def disable():
    global _global_mode
    if _global_mode is not None:
        _global_mode.__exit__(None, None, None)
        _global_mode = None


def _init_from_env():
    v = settings.get("TORCH_TPU_CHECK_NUMERICS")
    if v in ("1", "true", "yes", "raise"):
        enable(raise_on_mismatch=True)
    elif v == "warn":
        enable(raise_on_mismatch=False)

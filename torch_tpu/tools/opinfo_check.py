"""Differential check of tpu lowerings against PyTorch's CPU backend, driven by
PyTorch's own OpInfo database (torch.testing._internal.common_methods_invocations.op_db).

Every sample of an OpInfo runs on CPU and on tpu; results (and float32 gradients
where the OpInfo supports autograd) are compared with dtype-appropriate
tolerances. A sample that made any op fall back to the CPU is reported as
"fallback", not as a pass: only native lowerings count.
"""
import dataclasses
import traceback

import torch

from .. import debug
from . import opinfo_expected_failures as xfails

# Ops whose results are random: only dtype and shape are compared.
RANDOM_OPS = {
    "bernoulli", "normal", "normal_", "uniform", "rand_like", "randn_like", "randint_like",
    "multinomial", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout", "randint", "randn",
    "rand", "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
    "empty_permuted", "nn.functional.rrelu", "cauchy", "exponential", "geometric", "log_normal",
}

TOLERANCES = {
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    # Complex results are compared as their float components are (FFT outputs).
    torch.complex64: dict(rtol=1e-4, atol=1e-5),
    torch.complex128: dict(rtol=1e-7, atol=1e-7),
}

# Gradients chain more float operations than the forward (a softmax's backward
# sums over the keys twice): their float32 absolute tolerance is wider.
GRAD_TOLERANCES = {**TOLERANCES, torch.float32: dict(rtol=1e-4, atol=5e-5)}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int64": torch.int64,
          "bool": torch.bool}


@dataclasses.dataclass
class Result:
    op: str
    dtype: str
    passed: int = 0
    failed: int = 0
    xfailed: int = 0
    fallback: int = 0
    fallback_ops: set = dataclasses.field(default_factory=set)
    first_failure: str = ""

    @property
    def native(self):
        return self.fallback == 0 and (self.passed + self.failed + self.xfailed) > 0


def _to_tpu(t):
    if isinstance(t, torch.Tensor):
        if t._base is not None and t.layout == torch.strided:
            # A view keeps its place in its base's storage (as_strided and other
            # storage-relative ops see the whole base): move the base, re-take the view.
            base = t._base.detach().to("tpu")
            r = base.as_strided(t.size(), t.stride(), t.storage_offset())
        else:
            r = t.detach().to("tpu")
        return r.requires_grad_(t.requires_grad) if t.is_floating_point() else r
    return t


def _has_tensor(sample):
    items = [sample.input, *sample.args, *sample.kwargs.values()]
    flat = []
    for x in items:
        flat.extend(x if isinstance(x, (list, tuple)) else [x])
    return any(isinstance(x, torch.Tensor) for x in flat)


def _call_on_tpu(op, sample):
    try:
        return op(sample.input, *sample.args, **sample.kwargs)
    except TypeError as e:
        # A tensor-free sample got device="tpu" (factories); an op that makes no
        # tensor (broadcast_shapes) takes no device: call it as the CPU run did.
        if "unexpected keyword argument 'device'" not in str(e):
            raise
        kwargs = {k: v for k, v in sample.kwargs.items() if k != "device"}
        return op(sample.input, *sample.args, **kwargs)


def _random_sample(op, sample):
    """Samples whose result is random: the op itself draws numbers, or attention
    runs with dropout (the tpu generator's numbers differ from the CPU's)."""
    if op.name in RANDOM_OPS:
        return True
    if sample.kwargs.get("dropout_p", 0):
        return True
    if op.name == "nn.functional.multi_head_attention_forward":
        # (query, key, value, embed_dim, heads, in_w, in_b, bias_k, bias_v,
        #  add_zero_attn, dropout_p, ...): input is the query, so dropout_p is args[9].
        return bool(sample.kwargs.get("training", True)) and bool(sample.args[9])
    return False


def _flatten(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    return []


def _compare(actual, expected, dtype, random, tolerances=TOLERANCES):
    a, e = _flatten(actual), _flatten(expected)
    assert len(a) == len(e), f"{len(a)} outputs, expected {len(e)}"
    for x, y in zip(a, e):
        assert x.device.type == "tpu" or not y.numel(), f"output on {x.device}, expected tpu"
        assert x.dtype == y.dtype, f"dtype {x.dtype}, expected {y.dtype}"
        assert x.shape == y.shape, f"shape {tuple(x.shape)}, expected {tuple(y.shape)}"
        if random:
            continue
        torch.testing.assert_close(x.cpu(), y, equal_nan=True, check_device=False,
                                   **tolerances.get(y.dtype, dict(rtol=0, atol=0)))
    if not a and not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{actual!r} != {expected!r}"


def _grads(out, inputs):
    outs = [o for o in _flatten(out) if o.requires_grad and o.is_floating_point()]
    if not outs or not inputs:
        return None
    total = sum(o.sum() for o in outs)
    return torch.autograd.grad(total, inputs, allow_unused=True)


def _grad_inputs(sample):
    ts = [sample.input] if isinstance(sample.input, torch.Tensor) else list(
        t for t in (sample.input if isinstance(sample.input, (list, tuple)) else []))
    ts += [a for a in sample.args if isinstance(a, torch.Tensor)]
    return [t for t in ts if isinstance(t, torch.Tensor) and t.requires_grad]


def check(op, dtype_name, grad=False, max_samples=None):
    """Runs `op` (an OpInfo) for one dtype; returns a Result. The host tier is off
    meanwhile: every sample, whatever its shape, runs the op's lowering."""
    with debug.host_tier(False):
        return _check(op, dtype_name, grad, max_samples)


def _check(op, dtype_name, grad, max_samples):
    dtype = DTYPES[dtype_name]
    full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    res = Result(full + (".grad" if grad else ""), dtype_name)
    reason = xfails.reason(op.name, dtype_name, grad)
    samples = op.sample_inputs("cpu", dtype, requires_grad=grad)
    for i, sample in enumerate(samples):
        if max_samples is not None and i >= max_samples:
            break
        try:
            if grad:
                expected = op(sample.input, *sample.args, **sample.kwargs)
                exp_g = _grads(expected, _grad_inputs(sample))
            else:
                with torch.no_grad():
                    expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # the CPU rejects this sample too: nothing to compare
        random = _random_sample(op, sample)
        tpu_sample = sample.transform(_to_tpu)
        if "device" in tpu_sample.kwargs or not _has_tensor(sample):  # factories: build on tpu
            tpu_sample.kwargs["device"] = "tpu"
        before = dict(debug.metrics()["cpu_fallback_counts"])
        try:
            if grad:
                actual = _call_on_tpu(op, tpu_sample)
                act_g = _grads(actual, _grad_inputs(tpu_sample))
            else:
                with torch.no_grad():
                    actual = _call_on_tpu(op, tpu_sample)
            _compare(actual, expected, dtype, random)
            if grad and exp_g is not None:
                _compare([g for g in act_g if g is not None],
                         [g for g in exp_g if g is not None], dtype, random, GRAD_TOLERANCES)
            ok, msg = True, ""
        except Exception as e:  # a wrong result or an error on tpu only
            ok, msg = False, f"sample {i}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            if not str(e):
                msg += traceback.format_exc(limit=2)
        after = debug.metrics()["cpu_fallback_counts"]
        fell_back = {k for k, v in after.items() if v > before.get(k, 0)}
        if fell_back:
            res.fallback += 1
            res.fallback_ops |= fell_back
        elif ok:
            res.passed += 1
        elif reason:
            res.xfailed += 1
        else:
            res.failed += 1
            res.first_failure = res.first_failure or msg
    return res


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def supports(op, dtype_name):
    return DTYPES[dtype_name] in op.supported_dtypes("cpu")

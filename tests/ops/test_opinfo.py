"""The OpInfo differential check on a representative subset (CI); the full run is
`python -m torch_tpu.tools.coverage --full`.

For each listed OpInfo and dtype, every sample must match PyTorch's CPU result
(gradients too in float32 where the OpInfo supports autograd), or be listed in
torch_tpu/tools/opinfo_expected_failures.py with a reason, and no sample may
fall back to the CPU.
"""
import pytest
import torch

from torch_tpu.tools import opinfo_check

SUBSET = [
    "add", "sub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum", "atan2",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not",
    "bitwise_and", "neg", "abs", "sign", "floor", "ceil", "trunc", "exp", "log", "log1p",
    "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "reciprocal", "where", "clamp",
    "addcmul", "addcdiv", "sum", "mean", "amax", "amin", "mm", "addmm", "bmm", "baddbmm",
    "cat", "index_select", "softmax", "nn.functional.relu", "clone", "fill", "zero_", "arange",
    "matmul", "__rmatmul__", "nn.functional.cross_entropy",
    # op-coverage batch 2
    "prod", "asin", "logaddexp", "copysign", "floor_divide", "nan_to_num",
    "nn.functional.pad", "nn.functional.embedding_bag", "cummax", "lerp",
    # op-coverage batch 3
    "cdist", "nn.functional.grid_sample", "nn.functional.adaptive_max_pool2d",
    "nn.functional.unfold", "median", "aminmax", "polygamma", "linspace",
    "nn.functional.scaled_dot_product_attention",
]

_DB = {}


def _ops():
    if not _DB:
        for op in opinfo_check.op_db():
            if op.name in SUBSET:
                _DB.setdefault(op.name, []).append(op)
    return _DB


def _params():
    out = []
    for name in SUBSET:
        for dt in ("float32", "int64", "bool", "bfloat16"):
            out.append((name, dt, False))
        out.append((name, "float32", True))
    return out


@pytest.mark.parametrize("name,dtype,grad", _params(),
                         ids=lambda v: str(v) if not isinstance(v, bool) else ("grad" if v else "fwd"))
def test_opinfo(name, dtype, grad):
    ops = _ops()[name]
    for op in ops:
        if not opinfo_check.supports(op, dtype) or (grad and not op.supports_autograd):
            continue
        r = opinfo_check.check(op, dtype, grad=grad, max_samples=12)
        assert r.fallback == 0, f"{r.op} {dtype}: CPU fallback for {sorted(r.fallback_ops)}"
        assert r.failed == 0, f"{r.op} {dtype}: {r.failed} samples failed; first: {r.first_failure}"

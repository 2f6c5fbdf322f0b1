"""stablehlo_op: a hand-written StableHLO module as a PyTorch op."""
import torch

import torch_tpu._C as _C
from torch_tpu.kernels import _common


def _check_inputs(qualname, args, params):
    if len(args) != len(params):
        raise TypeError(f"{qualname} takes {len(params)} tensors, got {len(args)}")
    for i, (t, (dtype, shape)) in enumerate(zip(args, params)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{qualname}: argument {i} must be a Tensor, got {type(t).__name__}")
        _common.check_dtype(qualname, t)
        if t.dtype != dtype:
            raise TypeError(f"{qualname}: argument {i} has dtype {t.dtype}, the module's @main "
                            f"takes {dtype}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{qualname}: argument {i} has shape {tuple(t.shape)}, the module's "
                             f"@main takes {shape}")


def stablehlo_op(qualname, mlir_text, *, schema=None):
    """Registers ``torch.ops.<ns>.<name>`` computed by a StableHLO module.

    ``mlir_text`` is a module whose ``func.func public @main`` takes the op's
    tensor arguments in order and returns its results; its static shapes and
    element types are the op's contract (calls with others raise). ``schema``
    defaults to ``(Tensor x0, ...) -> Tensor`` (or a tuple of Tensors); a given
    one names the arguments and must have exactly @main's tensors. Returns the
    op (``torch.ops.<ns>.<name>``)."""
    ns, name = _common.split_name(qualname)
    params, results = _C._stablehlo_signature(mlir_text)

    def to_torch(sig):
        out = []
        for elem, dims in sig:
            if elem not in _common.MLIR_DTYPES:
                raise TypeError(f"{qualname}: element type {elem} has no torch dtype")
            out.append((_common.MLIR_DTYPES[elem], tuple(dims)))
        return out

    params, results = to_torch(params), to_torch(results)
    if not params or not results:
        raise ValueError(f"{qualname}: @main must take and return at least one tensor")
    rets = "Tensor" if len(results) == 1 else "(" + ", ".join(["Tensor"] * len(results)) + ")"
    if schema is None:
        schema = "(" + ", ".join(f"Tensor x{i}" for i in range(len(params))) + ") -> " + rets
    parsed = torch._C.parse_schema(name + schema)
    if (len(parsed.arguments) != len(params)
            or any(not isinstance(a.type, torch.TensorType) for a in parsed.arguments)
            or len(parsed.returns) != len(results)):
        raise ValueError(f"{qualname}: schema {schema!r} must take {len(params)} Tensors and "
                         f"return {len(results)} Tensors, as the module's @main does")

    lib = _common.define(qualname, schema)
    _C._add_custom_kernel_variant(qualname, mlir_text, "")

    def fake(*args):
        _check_inputs(qualname, args, params)
        outs = [torch.empty(shape, dtype=dtype, device=args[0].device) for dtype, shape in results]
        return outs[0] if len(outs) == 1 else tuple(outs)

    torch.library.register_fake(qualname, fake, lib=lib)
    _common.finish(qualname)
    return getattr(getattr(torch.ops, ns), name)

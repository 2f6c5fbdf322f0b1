"""Registration shared by stablehlo_op and jax_op: the op's schema in
torch.library, the registry lowering that inlines a StableHLO module, and the
static-argument key both sides of that lowering agree on."""
import torch

import torch_tpu._C as _C

# torch.library.Library objects must live as long as their ops.
_LIBRARIES = {}

# StableHLO element type names (hlo::mlir_name) <-> torch dtypes.
MLIR_DTYPES = {
    "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
    "i64": torch.int64, "ui8": torch.uint8, "ui16": torch.uint16, "ui32": torch.uint32,
    "ui64": torch.uint64, "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
    "f64": torch.float64, "complex<f32>": torch.complex64, "complex<f64>": torch.complex128,
    "f8E4M3FN": torch.float8_e4m3fn, "f8E5M2": torch.float8_e5m2,
    "f8E4M3FNUZ": torch.float8_e4m3fnuz, "f8E5M2FNUZ": torch.float8_e5m2fnuz,
}
SUPPORTED_DTYPES = frozenset(MLIR_DTYPES.values())


def split_name(qualname):
    if qualname.count("::") != 1 or not all(qualname.split("::")):
        raise ValueError(f"custom op name must be 'namespace::name', got {qualname!r}")
    ns, name = qualname.split("::")
    if ns in ("aten", "prim", "tpu"):
        raise ValueError(f"{qualname}: namespace {ns!r} is reserved; use your own")
    return ns, name


def static_key(names, values):
    """The non-tensor arguments as the C++ lowering formats them
    (csrc/lower/custom_kernel.cc): 'a=1,b=0.5,c=True', floats as %.17g."""
    parts = []
    for n, v in zip(names, values):
        if isinstance(v, bool):
            s = "True" if v else "False"
        elif isinstance(v, int):
            s = str(v)
        elif isinstance(v, float):
            s = "%.17g" % v
        elif v is None:
            s = "None"
        else:
            s = str(v)
        parts.append(f"{n}={s}")
    return ",".join(parts)


def define(qualname, schema, static_float_args=()):
    """Defines `qualname` with `schema` ("(Tensor x) -> Tensor") and its
    lowering. The lowering is registered first: an op's lowering lookup is
    cached the first time the generic kernel sees the op."""
    ns, name = split_name(qualname)
    if hasattr(getattr(torch.ops, ns), name):
        raise RuntimeError(f"{qualname} is already defined")
    _C._register_custom_kernel(qualname, list(static_float_args))
    lib = _LIBRARIES.get(ns)
    if lib is None:
        lib = _LIBRARIES[ns] = torch.library.Library(ns, "FRAGMENT")
    lib.define(name + schema)
    return lib


def finish(qualname):
    """Registers the tpu kernel (the generic lowered-op kernel) once the op's
    fake kernel exists."""
    ns, _ = split_name(qualname)
    _C._register_lowered_ops(ns)


def check_dtype(qualname, t):
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{qualname}: dtype {t.dtype} is not supported by custom kernels "
                        f"(supported: {sorted(str(d) for d in SUPPORTED_DTYPES)})")

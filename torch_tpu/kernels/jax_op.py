"""jax_op: a function of jax.numpy / jax.lax as a PyTorch op.

The op's StableHLO is JAX's lowering of the function, made lazily once per
input signature (shapes, dtypes and static arguments) when the op's fake
kernel first sees it, and handed to the registry lowering that inlines it
(torch_tpu/kernels/_common.py). JAX is imported only here.
"""
import functools
import inspect
import threading

import torch

import torch_tpu._C as _C
from torch_tpu.kernels import _common

_any_requires_grad = torch._C._any_requires_grad
_functorch_active = torch._C._are_functorch_transforms_active
_BelowAutograd = torch._C._AutoDispatchBelowAutograd

JAX_INSTALL_HINT = "pip install 'jax[cpu]==0.10.2' (the version torch_tpu is tested with)"
_STATIC_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def _require_jax():
    try:
        import jax
    except ImportError as e:
        raise ImportError(
            f"torch_tpu.kernels.jax_op needs JAX, which is not installed: {JAX_INSTALL_HINT}"
        ) from e
    return jax


def _x64(jax):
    """JAX keeps int64/float64 only with x64 enabled; our ops must keep them."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # older JAX
    return enable_x64()


def _schema_default(v):
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return repr(v)


class JaxOp:
    """The decorated function: calling it calls ``torch.ops.<ns>.<name>``.

    ``jax_fn`` is the original function; ``op`` the torch op."""

    def __init__(self, qualname, fn, tensor_names, statics, num_outputs, differentiable):
        self._jax = _require_jax()
        self.qualname = qualname
        self.jax_fn = fn
        self._tensor_names = list(tensor_names)
        self._statics = list(statics)  # [(name, default)]
        self._num_outputs = num_outputs
        self._variants = {}
        self._lock = threading.Lock()
        ns, name = _common.split_name(qualname)
        args = [f"Tensor {n}" for n in self._tensor_names]
        if self._statics:
            args.append("*")
            args += [f"{_STATIC_TYPES[type(d)]} {n}={_schema_default(d)}" for n, d in self._statics]
        rets = "Tensor" if num_outputs == 1 else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
        schema = "(" + ", ".join(args) + ") -> " + rets
        n_t = len(self._tensor_names)
        static_floats = [n_t + i for i, (_, d) in enumerate(self._statics) if type(d) is float]
        lib = _common.define(qualname, schema, static_floats)
        torch.library.register_fake(qualname, self._fake, lib=lib)
        torch.library.impl(qualname, "CPU", self._cpu, lib=lib)
        _common.finish(qualname)
        self.op = getattr(getattr(torch.ops, ns), name)
        self._call_op = self.op.default._op  # the C++ entry point, one Python frame less
        self._backward = None
        if differentiable:
            self._backward = _backward_op(self)
            torch.library.register_autograd(qualname, self._vjp, setup_context=self._setup,
                                            lib=lib)
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        if torch.compiler.is_compiling():  # Dynamo records the op itself
            return self.op(*args, **kwargs)
        # torch.library.register_autograd's kernel is Python, run on every call: with
        # no gradient to record it only redispatches below autograd, which this C++
        # guard does at a fraction of the host time (benchmarks/op_overhead.py).
        # functorch transforms get the op with its autograd kernel.
        try:
            if self._backward is None:
                return self._call_op(*args, **kwargs)
            if not _any_requires_grad(*args) and not _functorch_active():
                with _BelowAutograd():
                    return self._call_op(*args, **kwargs)
            return self.op(*args, **kwargs)
        except RuntimeError:
            _check_flat_tensors(self.qualname, args)
            raise

    # ---- lowering, once per signature ------------------------------------------------
    def _static_values(self, kwargs):
        return [kwargs.get(n, d) for n, d in self._statics]

    def variant(self, tensors, kwargs):
        """(StableHLO text, [(dtype, shape)] of the outputs) for this call's
        signature; lowers the JAX function the first time it is seen."""
        jax = self._jax
        if len(tensors) != len(self._tensor_names):
            raise TypeError(f"{self.qualname} takes {len(self._tensor_names)} tensors, "
                            f"got {len(tensors)}")
        for t in tensors:
            _common.check_dtype(self.qualname, t)
            if t.dtype not in _JAX_DTYPES:
                raise TypeError(f"{self.qualname}: dtype {t.dtype} is not supported by jax_op "
                                f"(supported: {sorted(str(d) for d in _JAX_DTYPES)})")
        statics = self._static_values(kwargs)
        key = (tuple((tuple(int(s) for s in t.shape), t.dtype) for t in tensors), tuple(statics))
        hit = self._variants.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._variants.get(key)
            if hit is not None:
                return hit
            specs = [jax.ShapeDtypeStruct(shape, _JAX_DTYPES[dt]) for shape, dt in key[0]]
            f = functools.partial(self.jax_fn, **dict(zip([n for n, _ in self._statics], statics)))
            with _x64(jax):
                outs = _flat_outputs(self.qualname, jax, jax.eval_shape(f, *specs))
                lowered = jax.jit(f, keep_unused=True).lower(*specs)  # all args stay parameters
                text = lowered.as_text()
            if len(outs) != self._num_outputs:
                raise ValueError(f"{self.qualname}: the JAX function returned {len(outs)} arrays, "
                                 f"declared num_outputs={self._num_outputs}")
            out_meta = [(_torch_dtype(o.dtype), tuple(o.shape)) for o in outs]
            _C._add_custom_kernel_variant(
                self.qualname, text,
                _common.static_key([n for n, _ in self._statics], statics))
            self._variants[key] = (text, out_meta)
            return text, out_meta

    def _fake(self, *tensors, **kwargs):
        _, outs = self.variant(tensors, kwargs)
        res = [torch.empty(shape, dtype=dt, device=tensors[0].device) for dt, shape in outs]
        return res[0] if len(res) == 1 else tuple(res)

    def _cpu(self, *tensors, **kwargs):
        """Runs the function with JAX on the host (CPU tensors in, CPU tensors out)."""
        import numpy as np
        jax = self._jax
        self.variant(tensors, kwargs)  # same checks as on tpu
        with _x64(jax):
            out = self.jax_fn(*[jax.numpy.asarray(t.detach().numpy()) for t in tensors],
                              **dict(zip([n for n, _ in self._statics],
                                         self._static_values(kwargs))))
        res = [torch.from_numpy(np.array(o)) for o in jax.tree_util.tree_leaves(out)]
        return res[0] if len(res) == 1 else tuple(res)

    # ---- autograd ------------------------------------------------------------------
    def _setup(self, ctx, inputs, output, keyword_only_inputs=None):
        # torch passes keyword_only_inputs only to ops that have some.
        ctx.save_for_backward(*inputs)
        ctx.statics = keyword_only_inputs or {}
        outs = output if isinstance(output, tuple) else (output,)
        ctx.out_meta = [(o.shape, o.dtype) for o in outs]

    def _vjp(self, ctx, *grads):
        primals = ctx.saved_tensors
        cts = [g if g is not None else torch.zeros(s, dtype=dt, device=primals[0].device)
               for g, (s, dt) in zip(grads, ctx.out_meta)]
        res = self._backward(*primals, *cts, **ctx.statics)
        res = res if isinstance(res, tuple) else (res,)
        return tuple(g if p.dtype.is_floating_point or p.dtype.is_complex else None
                     for g, p in zip(res, primals))


def _flat_outputs(qualname, jax, out):
    """The function's results as a list: one array, or a tuple/list of arrays. Other
    pytrees (dicts, nested tuples, dataclasses) are refused rather than flattened, so
    that the op's results are in the order the function wrote them."""
    if isinstance(out, jax.ShapeDtypeStruct):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, jax.ShapeDtypeStruct) for o in out):
        return list(out)
    raise TypeError(f"{qualname}: the JAX function must return an array or a tuple of arrays, "
                    f"got {jax.tree_util.tree_structure(out)}; pytrees of outputs are not "
                    "supported: return their leaves as a tuple and rebuild the structure "
                    "in Python")


def _check_flat_tensors(qualname, args):
    """A clear error for pytrees of tensors passed where the op takes tensors."""
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{qualname}: positional argument {i} is a {type(a).__name__}; "
                            "a jax_op takes tensors positionally (pytrees of tensors are not "
                            "supported: pass their leaves as separate arguments)")


def _backward_op(fwd):
    """The VJP of `fwd` as another jax op: (primals..., cotangents...) -> one
    gradient per primal (zeros for integer and boolean primals)."""
    jax = fwd._jax
    n = len(fwd._tensor_names)

    def bwd(*args, **statics):
        primals, cts = args[:n], args[n:]
        diff = [i for i, p in enumerate(primals) if jax.numpy.issubdtype(p.dtype, jax.numpy.inexact)]

        def g(*diff_primals):
            full = list(primals)
            for i, v in zip(diff, diff_primals):
                full[i] = v
            return fwd.jax_fn(*full, **statics)

        _, vjp = jax.vjp(g, *[primals[i] for i in diff])
        grads = vjp(cts[0] if fwd._num_outputs == 1 else tuple(cts))
        out = [jax.numpy.zeros_like(p) for p in primals]
        for i, gr in zip(diff, grads):
            out[i] = gr
        return tuple(out)

    tensor_names = list(fwd._tensor_names) + [f"grad_{i}" for i in range(fwd._num_outputs)]
    ns, name = _common.split_name(fwd.qualname)
    return JaxOp(f"{ns}::{name}_backward", bwd, tensor_names, fwd._statics, n,
                 differentiable=False)


def _jax_dtypes():
    try:
        import jax.numpy as jnp
    except ImportError:
        return {}
    return {
        torch.bool: jnp.bool_, torch.int8: jnp.int8, torch.int16: jnp.int16,
        torch.int32: jnp.int32, torch.int64: jnp.int64, torch.uint8: jnp.uint8,
        torch.uint16: jnp.uint16, torch.uint32: jnp.uint32, torch.uint64: jnp.uint64,
        torch.float16: jnp.float16, torch.bfloat16: jnp.bfloat16, torch.float32: jnp.float32,
        torch.float64: jnp.float64, torch.complex64: jnp.complex64,
        torch.complex128: jnp.complex128,
    }


class _LazyDtypes(dict):
    """torch dtype -> JAX dtype, filled on first use (importing JAX lazily)."""

    def _fill(self):
        if not dict.__len__(self):
            self.update(_jax_dtypes())

    def __contains__(self, k):
        self._fill()
        return dict.__contains__(self, k)

    def __getitem__(self, k):
        self._fill()
        return dict.__getitem__(self, k)


_JAX_DTYPES = _LazyDtypes()


def _torch_dtype(jax_dtype):
    import numpy as np
    name = np.dtype(jax_dtype).name
    return torch.bool if name == "bool" else getattr(torch, name)


def jax_op(qualname, *, num_outputs=1, differentiable=True):
    """Decorator: registers ``torch.ops.<ns>.<name>`` computed by the decorated
    JAX function. Its positional parameters are tensors; its keyword-only
    parameters (with defaults of type bool, int, float or str) are static:
    each value gets its own lowering. ``num_outputs`` is how many arrays it
    returns (a tuple when more than one). With ``differentiable`` the op gets a
    backward from ``jax.vjp`` (registered as ``<ns>::<name>_backward``)."""
    _require_jax()

    def deco(fn):
        tensors, statics = [], []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                if p.default is not p.empty:
                    raise TypeError(f"{qualname}: tensor parameter {p.name!r} may not have a "
                                    "default; make static parameters keyword-only")
                tensors.append(p.name)
            elif p.kind == p.KEYWORD_ONLY:
                if type(p.default) not in _STATIC_TYPES:
                    raise TypeError(f"{qualname}: keyword-only parameter {p.name!r} needs a "
                                    "default of type bool, int, float or str")
                statics.append((p.name, p.default))
            else:
                raise TypeError(f"{qualname}: *args/**kwargs are not supported")
        if not tensors:
            raise TypeError(f"{qualname}: the function must take at least one tensor")
        return JaxOp(qualname, fn, tensors, statics, num_outputs, differentiable)

    return deco

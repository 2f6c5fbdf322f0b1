"""Custom kernels as PyTorch ops: a StableHLO module or a JAX function becomes
``torch.ops.<ns>.<name>``, lowered by inlining its StableHLO into the program
torch_tpu builds, in Strict Eager, Defer & Fuse and ``torch.compile(backend="tpu")``
alike. See docs/kernels.md.

JAX is optional: this package imports it only when a ``jax_op`` is defined.
"""
from torch_tpu.kernels.stablehlo import stablehlo_op
from torch_tpu.kernels.jax_op import jax_op

__all__ = ["stablehlo_op", "jax_op"]

"""torch.compile(backend="tpu"): Dynamo + AOTAutograd graphs lowered through the
same registry as the eager modes, one fused StableHLO program per graph.

Imported lazily (by the `torch_dynamo_backends` entry point or by register()):
importing Dynamo costs time that eager-only programs should not pay.
"""


def register():
    """Registers the `tpu` backend and device interface with Dynamo when the
    package's entry point is not installed (idempotent)."""
    from torch._dynamo.backends import registry

    from .backend import tpu_backend
    if "tpu" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=tpu_backend, name="tpu")
    return tpu_backend

"""Target of the `torch.backends` entry point, so that `import torch` alone
registers the tpu device.

A top-level module, outside the torch_tpu package, so that a torch_tpu that
fails to import cannot fail before load() runs. When a user imports torch_tpu first, its
`import torch` runs this entry point while torch_tpu is still being imported;
`import torch_tpu` then returns the partly initialised package and the outer
import finishes the registration. A torch_tpu that fails to load must not make
`import torch` fail: it warns instead, and `import torch_tpu` shows the error.
"""
import sys
import warnings


def load():
    try:
        import torch_tpu  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any failure must leave torch importable
        for name in [m for m in sys.modules if m == "torch_tpu" or m.startswith("torch_tpu.")]:
            del sys.modules[name]
        warnings.warn(f"torch_tpu could not be loaded, the tpu device is unavailable: {e}")

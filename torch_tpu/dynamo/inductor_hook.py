"""Registers torch_tpu's inductor backend for the `tpu` device as soon as inductor's
backend registry (`torch._inductor.codegen.common`) exists.

`torch.compile(model)` uses the "inductor" backend, and inductor picks a code
generator per device from that registry. PyTorch fills it in
`init_backend_registration()`, where `tpu` gets its Pallas generator (Google's
torch_tpu + JAX) unless the entry is already taken; and an entry made later simply
replaces PyTorch's. So our `register_backend_for_device("tpu", ...)` wins in either
order; it only has to happen before inductor compiles a tpu graph.

Importing inductor costs seconds (Dynamo with it), which a program that never
compiles should not pay at `import torch`. So torch_tpu does not import it: if it is
already imported we register at once, otherwise a one-shot post-import hook
(a `sys.meta_path` finder for that one module, which removes itself on first use)
registers right after the module has run. PyTorch's code is untouched; the hook only
observes the import. It goes away once PyTorch's `init_backend_registration` consults
the PrivateUse1 device module for `tpu` before its built-in Pallas entry (today it asks
the device module, `_get_custom_mod_func("Scheduling")`, only for devices it has no
entry for).
"""
import importlib.abc
import importlib.machinery
import sys

_MODULE = "torch._inductor.codegen.common"


def _register():
    # A failure here must not break inductor for other devices: tpu graphs then reach
    # PyTorch's own tpu entry, and the warning says why.
    try:
        from . import inductor_backend
        inductor_backend.register()
    except Exception as e:  # noqa: BLE001
        import warnings
        warnings.warn(f"torch_tpu could not register its inductor backend for tpu: {e!r}")


class _Loader(importlib.abc.Loader):
    """The module's own loader, followed by our registration."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _register()

    def __getattr__(self, name):  # get_source, get_filename, ... as the real loader
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _MODULE:
            return None
        _uninstall()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_finder = None


def _uninstall():
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None


def install():
    """Called when torch_tpu is imported (idempotent)."""
    global _finder
    if _MODULE in sys.modules:
        _register()
        return
    if _finder is None:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)

"""Where the PJRT header and plugins live, found through Python packaging.

Imports nothing from torch so that the build (setup.py) and the C++ test runner
can use it before the extension exists.
"""
import importlib.util
import os

_CPU_PLUGIN_MODULE = "xla_plugins.xla_cpu_pjrt"


def _module_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def pjrt_include_dir():
    """Folder holding pjrt_c_api.h (from the xla-cpu-pjrt wheel)."""
    d = _module_dir(_CPU_PLUGIN_MODULE)
    if d is None or not os.path.exists(os.path.join(d, "include", "pjrt_c_api.h")):
        raise RuntimeError(
            "pjrt_c_api.h not found: install the PJRT CPU plugin with `pip install xla-cpu-pjrt`")
    return os.path.join(d, "include")


def cpu_plugin_path():
    """Path of the CPU PJRT plugin shared library, or None when not installed."""
    d = _module_dir(_CPU_PLUGIN_MODULE)
    if d is None:
        return None
    p = os.path.join(d, "xla_cpu_pjrt.so")
    return p if os.path.exists(p) else None


def tpu_plugin_path():
    """Path of libtpu's PJRT plugin, or None when libtpu is not installed."""
    for name in ("libtpu",):
        d = _module_dir(name)
        if d:
            p = os.path.join(d, "libtpu.so")
            if os.path.exists(p):
                return p
    return None


def cuda_plugin_path():
    """Path of a CUDA PJRT plugin (jax-cuda13/12-pjrt, xla-cuda13/12-pjrt), or None."""
    for mod, lib in (("jax_plugins.xla_cuda13", "xla_cuda_plugin.so"),
                     ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so"),
                     ("xla_plugins.xla_cuda13_pjrt", "xla_cuda13_pjrt.so"),
                     ("xla_plugins.xla_cuda12_pjrt", "xla_cuda12_pjrt.so")):
        d = _module_dir(mod)
        if d:
            p = os.path.join(d, lib)
            if os.path.exists(p):
                return p
    return None


if __name__ == "__main__":
    import sys
    what = sys.argv[1] if len(sys.argv) > 1 else "include"
    print({"include": pjrt_include_dir, "cpu": cpu_plugin_path}[what]())

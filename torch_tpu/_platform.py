"""Choosing the PJRT platform: TORCH_TPU_PLATFORM=tpu|cpu|cuda|/path/to/plugin.so.

Default: TPU when libtpu is installed and a TPU is attached, else the CPU plugin.
Nothing is loaded here; the plugin is opened on first device use, so a missing or
broken plugin raises a clear error there rather than breaking `import torch`.
"""
import glob
import os

from . import _plugin_paths, settings


def _tpu_attached():
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def select():
    """Returns (platform name, plugin path or a message starting with '!')."""
    want = settings.raw("TORCH_TPU_PLATFORM")
    if not want:
        tpu = _plugin_paths.tpu_plugin_path()
        if tpu and _tpu_attached():
            return "tpu", tpu
        want = "cpu"
    if want == "cpu":
        p = _plugin_paths.cpu_plugin_path()
        return "cpu", p or "!the CPU PJRT plugin is not installed: pip install xla-cpu-pjrt"
    if want == "tpu":
        p = _plugin_paths.tpu_plugin_path()
        return "tpu", p or "!libtpu is not installed: pip install libtpu (on a TPU VM)"
    if want in ("cuda", "gpu"):
        p = _plugin_paths.cuda_plugin_path()
        return "cuda", p or "!no CUDA PJRT plugin found: pip install jax-cuda12-pjrt (or -cuda13-)"
    return "plugin", want


def cpu_device_count():
    return settings.get("TORCH_TPU_CPU_DEVICES")


def plugin_logs():
    """TORCH_TPU_LOG_LEVEL=info (or debug) lets the PJRT plugin's start-up log lines
    (absl INFO lines, "All log messages before absl::InitializeLog()...") reach stderr;
    by default they are held back and shown only if the plugin fails to start.
    Asking for them wins over a TF_CPP_MIN_LOG_LEVEL inherited from the environment
    (importing JAX sets it to 1 in its process and every child's), which would drop
    the plugin's INFO lines before they are written."""
    level = settings.get("TORCH_TPU_LOG_LEVEL")
    if level in ("debug", "info"):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    return level in ("debug", "info")


def keep_cpu_heap():
    """TORCH_TPU_CPU_KEEP_FREED_MEMORY=1 (the default; 0 turns it off): on the CPU plugin,
    whose device memory is this process's heap, glibc keeps freed memory for reuse
    instead of unmapping large blocks and emptied heaps, which every program run would
    fault in again (csrc/engine/host_heap.h). torch.tpu.empty_cache() gives it back.
    Off when the environment already tunes glibc's malloc (GLIBC_TUNABLES with a
    glibc.malloc setting, or a MALLOC_*_ variable): the user's choice wins."""
    if not settings.get("TORCH_TPU_CPU_KEEP_FREED_MEMORY"):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return not any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ)

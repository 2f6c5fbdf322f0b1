"""The compile cache: compiled programs are kept in memory for the process and as
serialised executables on disk, so that a program compiles once per machine.

Environment (read at import; configure() changes it later):
  TORCH_TPU_CACHE=0            no persistent cache (memory only)
  TORCH_TPU_CACHE_DIR          directory (default ~/.cache/torch_tpu); processes that
                               share it share compiled programs
  TORCH_TPU_CACHE_MAX_BYTES    size bound, least recently used entries go first
                               (default 10 GiB; accepts 500M, 2G ...)

A corrupt, truncated, foreign or unreadable entry is recompiled and replaced; a
directory that cannot be written leaves the cache in memory only. Each warns once.
"""
import os
import warnings

from . import _C, settings

DEFAULT_MAX_BYTES = 10 << 30
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def default_dir():
    return os.path.join(os.path.expanduser("~"), ".cache", "torch_tpu")


def _parse_bytes(text):
    t = text.strip().lower().rstrip("ib").rstrip("b")
    if t and t[-1] in _UNITS:
        return int(float(t[:-1]) * _UNITS[t[-1]])
    return int(t)


def configure(directory=None, max_bytes=None, enabled=None):
    """Changes the persistent cache for the rest of the process; arguments left as
    None keep their current value."""
    info = _C._cache_info()
    directory = info["dir"] if directory is None else os.path.abspath(os.path.expanduser(directory))
    max_bytes = info["max_bytes"] if max_bytes is None else int(max_bytes)
    enabled = info["enabled"] if enabled is None else bool(enabled)
    _C._cache_configure(directory, max_bytes, enabled)


def _configure_from_env():
    enabled = settings.get("TORCH_TPU_CACHE")
    directory = settings.raw("TORCH_TPU_CACHE_DIR") or default_dir()
    max_bytes = DEFAULT_MAX_BYTES
    text = settings.raw("TORCH_TPU_CACHE_MAX_BYTES")
    if text:
        try:
            max_bytes = _parse_bytes(text)
        except ValueError:
            warnings.warn(f"torch_tpu: TORCH_TPU_CACHE_MAX_BYTES={text!r} is not a size; using "
                          f"{DEFAULT_MAX_BYTES} bytes")
    _C._cache_configure(os.path.abspath(os.path.expanduser(directory)), max_bytes, enabled)


def enabled():
    """Whether compiled programs are also kept on disk."""
    return _C._cache_info()["enabled"]


def directory():
    return _C._cache_info()["dir"]


def stats():
    """A dict: enabled, dir, max_bytes; memory_hits, memory_misses, memory_entries
    (the in-process cache); disk_hits, disk_misses, disk_bad_entries, disk_writes,
    disk_write_failures, disk_bytes_read, disk_bytes_written, disk_evictions (this
    process), disk_entries, disk_bytes (the directory now); compiles and
    compile_seconds (XLA compilations this process), disk_load_seconds."""
    m = _C._metrics()
    s = dict(_C._cache_info())
    s["memory_hits"] = m["cache_hits"]
    s["memory_misses"] = m["cache_misses"]
    s["memory_entries"] = _C._program_cache_size()
    for k in ("disk_hits", "disk_misses", "disk_bad_entries", "disk_writes",
              "disk_write_failures", "disk_bytes_read", "disk_bytes_written",
              "disk_evictions", "disk_load_seconds"):
        s[k] = m[k]
    s["compiles"] = m["programs_compiled"]
    s["compile_seconds"] = m["compile_seconds"]
    return s


def clear(memory=True, disk=True):
    """Forgets compiled programs: the in-process cache and/or every entry on disk
    (other processes' in-memory caches are theirs). Returns disk entries removed."""
    if memory:
        _C._clear_program_cache()
    return int(_C._cache_clear_disk()) if disk else 0

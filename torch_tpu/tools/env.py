"""What to paste into a bug report: versions, platform, devices, cache and settings.

    python -m torch_tpu.tools.env          # text
    python -m torch_tpu.tools.env --json   # the same as JSON

Each part is collected on its own, so a broken plugin or device still leaves the rest
of the report (the failure is reported in its place).
"""
import argparse
import importlib.metadata
import json
import os
import platform
import sys


def _version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _safe(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (a report must survive any failure)
        return f"error: {type(e).__name__}: {e}"


def _devices():
    import torch
    n = torch.tpu.device_count()
    return {"count": n, "kind": torch.tpu.get_device_name(0) if n else None}


def _plugin():
    import torch_tpu
    C = torch_tpu._C
    return {"platform": C._platform_name(), "path": C._plugin_path(),
            "platform_version": _safe(C._platform_version)}


def _cache():
    from torch_tpu import cache
    info = cache.stats()
    return {k: info[k] for k in ("enabled", "dir", "max_bytes") if k in info}


def collect():
    """The report as a dict."""
    import torch
    import torch_tpu
    from torch_tpu import _compat, settings
    return {
        "torch_tpu": _version("torch_tpu"),
        "torch_tpu_location": os.path.dirname(os.path.abspath(torch_tpu.__file__)),
        "extension": getattr(torch_tpu._C, "__file__", None),
        "supported_torch": _compat.supported_range(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "xla_cpu_pjrt": _version("xla-cpu-pjrt"),
        "libtpu": _version("libtpu"),
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "plugin": _safe(_plugin),
        "devices": _safe(_devices),
        "execution_mode": _safe(torch_tpu.get_execution_mode),
        "cache": _safe(_cache),
        "settings": settings.in_effect(),
        "unknown_settings": settings.unknown_in_environment(),
    }


def format_text(report):
    lines = []
    for key, value in report.items():
        if isinstance(value, dict) and key != "settings":
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        elif key == "settings":
            value = " ".join(f"{k}={v}" for k, v in value.items()) or "(none set)"
        elif isinstance(value, list):
            value = ", ".join(value) or "(none)"
        lines.append(f"{key + ':':22}{value}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    report = collect()
    print(json.dumps(report, indent=2) if args.json else format_text(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

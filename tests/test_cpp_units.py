"""Runs the C++ unit tests of the torch-free layers (csrc/pjrt, csrc/hlo; collectives_test
runs in-program collectives on the CPU plugin's several devices).

They are built by the extension build into build/ext; each binary takes the CPU
plugin path and prints 'N passed, M failed'.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "torch_tpu"))
import _plugin_paths  # noqa: E402

sys.path.pop(0)


@pytest.mark.parametrize("binary", ["pjrt_test", "hlo_test", "collectives_test"])
def test_cpp_unit(binary):
    path = os.path.join(ROOT, "build", "ext", binary)
    assert os.path.exists(path), f"{path} missing: build with `pip install --no-build-isolation -e .`"
    plugin = _plugin_paths.cpu_plugin_path()
    r = subprocess.run([path, plugin], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert " 0 failed" in r.stdout

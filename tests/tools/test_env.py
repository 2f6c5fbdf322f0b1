"""python -m torch_tpu.tools.env: the report users paste into a bug report."""
import json
import subprocess
import sys

import torch


def _run(tmp_path, *args, **env):
    import os
    full = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path), TORCH_TPU_CACH_DIR="typo", **env)
    return subprocess.run([sys.executable, "-m", "torch_tpu.tools.env", *args], env=full,
                          capture_output=True, text=True, timeout=600)


def test_env_report_json(tmp_path):
    r = _run(tmp_path, "--json", TORCH_TPU_EXECUTION_MODE="defer_and_fuse")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["torch"] == torch.__version__
    assert report["torch_tpu"]  # the installed distribution's version
    assert report["extension"].endswith(".so")
    assert report["supported_torch"] == "torch 2.11 to 2.15"
    assert report["plugin"]["platform"] == "cpu"
    assert report["xla_cpu_pjrt"]
    assert report["devices"]["count"] >= 1
    assert report["execution_mode"] == "defer_and_fuse"
    assert report["cache"]["dir"] == str(tmp_path)
    assert report["settings"]["TORCH_TPU_EXECUTION_MODE"] == "defer_and_fuse"
    assert "TORCH_TPU_SET_ACCELERATE_TORCH_DEVICE" not in report["settings"]  # ours, internal
    assert report["unknown_settings"] == ["TORCH_TPU_CACH_DIR"]


def test_env_report_text(tmp_path):
    r = _run(tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"torch:                {torch.__version__}" in r.stdout
    assert "unknown_settings:     TORCH_TPU_CACH_DIR" in r.stdout

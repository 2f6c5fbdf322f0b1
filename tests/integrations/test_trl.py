"""TRL's SFT, DPO and GRPO trainers on tpu in one process, against the same runs on the CPU
(torch_tpu not loaded there). Each run is `trl_run.py` in its own process, as a user's
script. bf16=True must really autocast: a decoder matmul inside the training step computes
in bfloat16 (TRL's log-probabilities read `lm_head.weight` directly, so the check hooks a
decoder layer instead)."""
import json
import os
import subprocess
import sys

import pytest
import torch

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trl_run.py")
CPU_ONLY = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def _run(kind, out_dir, opts, env=None, timeout=900):
    os.makedirs(out_dir, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("ACCELERATE_") and k != "TORCH_TPU_SET_ACCELERATE_TORCH_DEVICE"}
    full_env.update(env or {})
    try:
        proc = subprocess.run([sys.executable, SCRIPT, kind, str(out_dir), json.dumps(opts)],
                              env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"TRL {kind} run did not finish in {timeout} s (hang)")
    assert proc.returncode == 0, proc.stdout[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _on_tpu_and_cpu(kind, tmp_path, opts):
    tpu = _run(kind, tmp_path / "tpu", opts)
    cpu = _run(kind, tmp_path / "cpu", dict(opts, use_cpu=True), env=CPU_ONLY)
    assert tpu["device"] == "tpu:0" and cpu["device"] == "cpu"
    assert tpu["global_step"] == cpu["global_step"] == 3 and len(tpu["losses"]) == 3
    return tpu, cpu


def _weights(out_dir):
    return torch.load(os.path.join(out_dir, "final_weights.pt"))


def test_sft_bf16_autocasts_on_tpu_and_matches_cpu(tmp_path):
    tpu, cpu = _on_tpu_and_cpu("sft", tmp_path, {"bf16": True})
    assert tpu["train_matmul_dtype"] == "torch.bfloat16"
    assert tpu["param_dtype"] == "torch.float32"  # master weights stay float32
    torch.testing.assert_close(tpu["losses"], cpu["losses"], rtol=2e-2, atol=2e-2)
    t, c = _weights(tmp_path / "tpu"), _weights(tmp_path / "cpu")
    for name in c:
        torch.testing.assert_close(t[name], c[name], rtol=0, atol=2e-2, msg=name)


@pytest.mark.slow
def test_sft_float32_matches_cpu(tmp_path):
    tpu, cpu = _on_tpu_and_cpu("sft", tmp_path, {"bf16": False})
    assert tpu["train_matmul_dtype"] == "torch.float32"
    torch.testing.assert_close(tpu["losses"], cpu["losses"], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True])
def test_dpo_matches_cpu(tmp_path, bf16):
    tpu, cpu = _on_tpu_and_cpu("dpo", tmp_path, {"bf16": bf16})
    assert tpu["train_matmul_dtype"] == ("torch.bfloat16" if bf16 else "torch.float32")
    tol = 2e-3 if bf16 else 1e-4
    torch.testing.assert_close(tpu["losses"], cpu["losses"], rtol=tol, atol=tol)


@pytest.mark.slow
def test_grpo_bf16_trains_on_tpu(tmp_path):
    """GRPO samples its completions from the tpu generator, so its losses cannot be compared
    with the CPU's. Its loss starts near 0 by construction (normalised advantages, ratio 1):
    equal losses in float32 and bf16 say nothing about autocast; the matmul dtype does."""
    res = _run("grpo", tmp_path, {"bf16": True})
    assert res["device"] == "tpu:0" and res["global_step"] == 3
    assert res["train_matmul_dtype"] == "torch.bfloat16"
    assert all(abs(v) < 1e3 for v in res["losses"])  # finite, sane
    assert res["changed"] > 0  # the optimizer moved the weights

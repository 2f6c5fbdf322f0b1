"""Transformers' Trainer on tpu with nothing but torch and transformers imported (no
environment variable set by the user), against the CPU reference.

Each run is a fresh interpreter running trainer_run.py: the tpu run as a user would
start it, the reference with torch_tpu not loaded at all (TORCH_DEVICE_BACKEND_AUTOLOAD=0,
use_cpu=True), so it is PyTorch's own CPU backend.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

SCRIPT = os.path.join(os.path.dirname(__file__), "trainer_run.py")
CPU_ONLY = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
# Four optimizer steps of two micro-batches each, evaluated and saved after step 2.
RUN = {"max_steps": 4, "grad_accum": 2, "eval_steps": 2, "save_steps": 2}


def _user_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ACCELERATE_") and k != "TORCH_TPU_SET_ACCELERATE_TORCH_DEVICE"}
    env.update(extra or {})
    return env


def _start(out_dir, opts, env=None, launcher=()):
    return subprocess.Popen([sys.executable, *launcher, SCRIPT, str(out_dir), json.dumps(opts)],
                            env=_user_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(proc, timeout=300):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Trainer run did not finish (hang)")
    assert proc.returncode == 0, out[-4000:]
    return json.loads(out.strip().splitlines()[-1]), out


def _weights(out_dir):
    return torch.load(os.path.join(out_dir, "final_weights.pt"))


def _assert_weights_close(a, b, **tol):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=k, **tol)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tpu run and the CPU reference, started together (they are independent)."""
    tpu_dir, cpu_dir = tmp_path_factory.mktemp("tpu"), tmp_path_factory.mktemp("cpu")
    tpu = _start(tpu_dir, RUN)
    cpu = _start(cpu_dir, dict(RUN, use_cpu=True), env=CPU_ONLY)
    (tpu_res, _), (cpu_res, _) = _finish(tpu), _finish(cpu)
    return tpu_dir, tpu_res, cpu_dir, cpu_res


def test_trainer_trains_on_tpu_like_cpu(runs):
    tpu_dir, tpu, cpu_dir, cpu = runs
    assert tpu["device"] == "tpu:0" and tpu["args_device"] == "tpu:0"
    assert cpu["device"] == "cpu"
    assert tpu["global_step"] == cpu["global_step"] == RUN["max_steps"]
    # Every logged training loss (after gradient accumulation) and every evaluation.
    assert len(tpu["losses"]) == RUN["max_steps"] and len(tpu["eval_losses"]) == 2
    torch.testing.assert_close(tpu["losses"], cpu["losses"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tpu["eval_losses"], cpu["eval_losses"], rtol=1e-5, atol=1e-5)
    _assert_weights_close(_weights(tpu_dir), _weights(cpu_dir), rtol=1e-4, atol=1e-5)


def test_trainer_checkpoint_has_optimizer_scheduler_and_rng(runs):
    ckpt = os.path.join(runs[0], "checkpoint-2")
    for f in ("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"):
        assert os.path.isfile(os.path.join(ckpt, f)), f
    opt = torch.load(os.path.join(ckpt, "optimizer.pt"), map_location="cpu")
    assert opt["state"], "AdamW moments were saved"


def test_trainer_resume_continues_exactly(runs, tmp_path):
    """Resuming from checkpoint-2 (model, AdamW moments, LR schedule, RNG, data order)
    ends where the uninterrupted run ended."""
    tpu_dir = runs[0]
    res, _ = _finish(_start(tmp_path, dict(RUN, resume=os.path.join(tpu_dir, "checkpoint-2"))))
    assert res["global_step"] == RUN["max_steps"]
    _assert_weights_close(_weights(tmp_path), _weights(tpu_dir), rtol=0, atol=0)


# Dropout draws on the tpu generator every step, so a resumed run continues exactly only
# when that generator's state came back from the checkpoint too.
DROPOUT_RUN = dict(RUN, dropout=0.2, tpu_rng_callback=True)


@pytest.fixture(scope="module")
def dropout_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dropout")
    res, _ = _finish(_start(out, DROPOUT_RUN))
    return out, res


def test_resume_restores_the_tpu_generator(dropout_run, tmp_path):
    """Transformers saves only a fixed list of devices' generators (not tpu);
    TpuRngStateCallback keeps tpu's in trainer_state.json. Resumed from checkpoint-2, the
    dropout masks, losses, weights and the next random draw on tpu equal the
    uninterrupted run's."""
    full_dir, full = dropout_run
    ckpt = os.path.join(full_dir, "checkpoint-2")
    with open(os.path.join(ckpt, "trainer_state.json")) as f:
        saved = json.load(f)["stateful_callbacks"]["TpuRngStateCallback"]["attributes"]
    assert len(saved["tpu_rng_states"]) == torch.tpu.device_count()
    res, _ = _finish(_start(tmp_path, dict(DROPOUT_RUN, resume=ckpt)))
    assert res["global_step"] == RUN["max_steps"]
    # The resumed log starts with the checkpoint's two entries; steps 3 and 4 are new.
    assert res["losses"] == full["losses"]  # bit for bit
    assert res["rand_after"] == full["rand_after"]
    _assert_weights_close(_weights(tmp_path), _weights(full_dir), rtol=0, atol=0)


@pytest.mark.slow
def test_resume_without_the_callback_reseeds_the_tpu_generator(dropout_run, tmp_path):
    """The control for the test above: the same checkpoint resumed without the callback
    restarts the tpu generator from the seed, so its draws differ."""
    full_dir, full = dropout_run
    opts = dict(DROPOUT_RUN, tpu_rng_callback=False,
                resume=os.path.join(full_dir, "checkpoint-2"))
    res, _ = _finish(_start(tmp_path, opts))
    assert res["rand_after"] != full["rand_after"]


def test_trainer_bf16_trains_on_tpu_like_cpu(tmp_path):
    """bf16=True: Accelerate runs the forward under torch.autocast("tpu", bfloat16);
    the weights and the optimizer stay float32. The CPU reference autocasts too (its own
    op policy, so the losses agree to bfloat16's precision, not bit for bit)."""
    opts = {"max_steps": 3, "bf16": True}
    tpu = _start(tmp_path / "tpu", opts)
    cpu = _start(tmp_path / "cpu", dict(opts, use_cpu=True), env=CPU_ONLY)
    (t, out), (c, _) = _finish(tpu), _finish(cpu)
    assert t["device"] == "tpu:0" and t["param_dtype"] == "torch.float32"
    assert t["autocast_dtype"] == "torch.bfloat16", out[-2000:]
    assert len(t["losses"]) == 3
    torch.testing.assert_close(t["losses"], c["losses"], rtol=2e-2, atol=2e-2)
    _assert_weights_close(_weights(tmp_path / "tpu"), _weights(tmp_path / "cpu"), rtol=0, atol=2e-2)


def test_multi_process_trainer_stops_at_start_with_clear_error(tmp_path):
    """Accelerate 1.15 cannot wrap a tpu model for DDP: two processes must not train
    unsynchronised replicas. They stop before the first step and say what to do."""
    proc = _start(tmp_path, {"max_steps": 2},
                  launcher=("-m", "torch.distributed.run", "--nproc_per_node", "2",
                            "--master_port", "29617"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert "would train unsynchronised replicas" in out
    assert "Run one process per job" in out
    assert "'loss'" not in out  # no training step ran


@pytest.mark.slow
def test_trainer_with_compiled_model_matches_cpu(tmp_path):
    """model.compile(backend="tpu") before Trainer (Accelerate 1.15's DynamoBackend enum
    cannot name "tpu", so TrainingArguments(torch_compile_backend="tpu") is refused)."""
    opts = {"max_steps": 3, "eval_steps": 3}
    tpu = _start(tmp_path / "tpu", dict(opts, module_compile="tpu"))
    cpu = _start(tmp_path / "cpu", dict(opts, use_cpu=True), env=CPU_ONLY)
    (t, _), (c, _) = _finish(tpu), _finish(cpu)
    assert t["device"] == "tpu:0"
    torch.testing.assert_close(t["losses"], c["losses"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(t["eval_losses"], c["eval_losses"], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_trainer_torch_compile_default_backend_matches_cpu(tmp_path):
    """TrainingArguments(torch_compile=True): Accelerate compiles with "inductor", which on
    tpu hands each graph to torch_tpu's compiler (torch_tpu/dynamo/inductor_backend.py)."""
    opts = {"max_steps": 3, "eval_steps": 3}
    tpu = _start(tmp_path / "tpu", dict(opts, torch_compile=True))
    cpu = _start(tmp_path / "cpu", dict(opts, use_cpu=True), env=CPU_ONLY)
    (t, _), (c, _) = _finish(tpu), _finish(cpu)
    assert t["device"] == "tpu:0"
    torch.testing.assert_close(t["losses"], c["losses"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(t["eval_losses"], c["eval_losses"], rtol=1e-4, atol=1e-4)

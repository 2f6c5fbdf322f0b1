"""Ray Train on tpu (see docs/ray.md): in a 2-worker TorchTrainer,
`ray.train.torch.get_device()` is tpu in every worker, prepare_model /
prepare_data_loader put the model and batches on tpu under DDP over our
`tpu_dist` backend (Ray loads it through `torch_tpu._loader.load()`), the final
parameters are equal across workers and within 1e-4 of one CPU process, and the
checkpoint reported to Ray restores."""
import json
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(tmp_path, *args, timeout=600):
    # RAY_DEDUP_LOGS=0: Ray folds workers' similar log lines into one ("repeated 2x
    # across cluster") when they arrive close together, which hid a rank's WORKER line.
    env = dict(os.environ, RAY_TRAIN_V2_ENABLED="0", OMP_NUM_THREADS="1", RAY_DEDUP_LOGS="0",
               PYTHONPATH=os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]))
    try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "ray_train_run.py"), *map(str, args),
                            str(tmp_path / "storage")],
                           env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the Ray run did not finish within {timeout}s: {e}")
    out = p.stdout + p.stderr
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert p.returncode == 0 and lines, out[-8000:]
    return json.loads(lines[-1][len("RESULT "):]), out


def check(result, out, epochs):
    m = result["metrics"]
    assert m["device"] == "tpu" and m["param_device"] == "tpu" and m["batch_device"] == "tpu", m
    assert m["accelerate_device"] == "tpu" and m["backend"] == "tpu_dist", m
    assert m["spread"] == 0.0, m  # parameters equal across workers
    assert result["checkpoint_epoch"] == epochs == m["epoch"], result
    assert result["max_diff_vs_cpu"] <= 1e-4, result
    # Every worker, not only the one whose metrics Ray returns, saw tpu.
    workers = [l for l in out.splitlines() if "WORKER rank=" in l]
    for rank in (0, 1):
        mine = [l for l in workers if f"rank={rank} " in l]
        assert mine and all('"device": "tpu"' in l for l in mine), workers


def test_torch_trainer_two_workers_on_tpu(tmp_path):
    result, out = run(tmp_path, 2)
    check(result, out, 2)


@pytest.mark.slow
def test_resume_from_reported_checkpoint(tmp_path):
    result, out = run(tmp_path, 4, "resume", timeout=400)
    check(result, out, 4)


def test_ray_names_exist():
    """What Ray's TPU device manager calls on torch_tpu, without starting Ray."""
    from ray.air._internal.device_manager.tpu import TPUTorchDeviceManager

    import torch
    import torch.distributed as dist
    import torch_tpu._loader

    assert torch_tpu._loader.load() is None
    TPUTorchDeviceManager.register_custom_torch_dist_backend()
    assert "TPU_DIST" in dist.Backend._plugins
    manager = TPUTorchDeviceManager()
    assert manager.is_available() and manager.get_devices() == [torch.device("tpu")]


CPU_WORKERS = """
import tempfile, ray, torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

def train_fn(config):
    import ray.train, ray.train.torch, torch.distributed as dist
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 2),
                                          move_to_device=torch.device("tpu"))
    model(torch.ones(3, 4, device="tpu")).sum().backward()
    print("CPU_WORKERS", dist.get_rank(), next(model.parameters()).device.type,
          ray.train.torch.get_device().type, dist.get_backend(), flush=True)

ray.init(num_cpus=3, include_dashboard=False)
r = TorchTrainer(train_fn, scaling_config=ScalingConfig(num_workers=2),
                 torch_config=TorchConfig(backend="tpu"),
                 run_config=RunConfig(storage_path=tempfile.mkdtemp())).fit()
assert r.error is None, r.error
"""


@pytest.mark.slow
def test_default_trainer_with_cpu_workers_places_on_tpu_itself():
    """Ray Train's default (V2) trainer with CPU workers: docs/ray.md's fallback.
    get_device() says cpu there (Ray decides it from the worker's resources)."""
    p = subprocess.run([sys.executable, "-c", CPU_WORKERS], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-8000:]
    for rank in (0, 1):
        assert f"CPU_WORKERS {rank} tpu cpu tpu" in out, out[-8000:]

"""TorchTitan's own Trainer (`examples/torchtitan/train.py`: `torchtitan.train` after the
FlexAttention opt-in) on tpu under torchrun, in the TorchTitan environment .venv-titan
(scripts/install_titan.sh). The Llama 3 debug model with its FlexAttention and
block-causal masks; tokenizer and data from examples/torchtitan/make_assets.py.

The reference is examples/torchtitan/cpu_reference.py: the same weights (the Trainer's
DCP seed checkpoint), data, loss, clipping, AdamW and LR schedule on the CPU in one
process (TorchTitan's Trainer does not run on a CPU-only machine)."""
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TITAN_PY = os.path.join(ROOT, ".venv-titan", "bin", "python")
EXAMPLES = os.path.join(ROOT, "examples", "torchtitan")
STEP_LOSS = re.compile(r"step:\s*(\d+)\s+loss:\s*([-+0-9.naife]+)")
REF_LOSS = re.compile(r"^step (\d+) loss (\S+)", re.M)
RTOL = 1e-3  # float32 throughout; the runs agree to ~1e-6, the target is 1e-2

pytestmark = pytest.mark.skipif(
    not os.path.exists(TITAN_PY),
    reason="TorchTitan environment missing: bash scripts/install_titan.sh")


def _args(assets, dump, steps=10, batch=2, seq=128, *extra):
    return ["--model.name", "llama3", "--model.flavor", "debugmodel_flex_attn",
            "--model.hf_assets_path", os.path.join(assets, "tokenizer"),
            "--training.dataset", "c4_test",
            "--training.dataset_path", os.path.join(assets, "c4_test"),
            "--training.local_batch_size", str(batch), "--training.seq_len", str(seq),
            "--training.steps", str(steps), "--lr_scheduler.warmup_steps", "2",
            "--training.mixed_precision_param", "float32",
            "--metrics.log_freq", "1", "--metrics.disable_color_printing",
            "--job.dump_folder", str(dump), *extra]


def _run(cmd, env=None, timeout=1200):
    full_env = dict(os.environ, **(env or {}))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd[:4]} did not finish in {timeout} s (hang)")
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def _torchrun(nproc, args, timeout=1200, done="Training completed"):
    """Runs the Trainer on `nproc` ranks; returns {step: loss} as TorchTitan logs it."""
    out = _run([TITAN_PY, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                os.path.join(EXAMPLES, "train.py"), *args],
               # Each rank takes the tpu device with its LOCAL_RANK's index (TorchTitan
               # 0.2.2), so the CPU plugin exposes one device per rank.
               env={"TORCH_TPU_CPU_DEVICES": str(nproc)}, timeout=timeout)
    assert done in out, out[-4000:]
    return {int(s): float(v) for s, v in STEP_LOSS.findall(out)}


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    path = tmp_path_factory.mktemp("titan_assets")
    _run([sys.executable, os.path.join(EXAMPLES, "make_assets.py"), str(path)])
    return str(path)


@pytest.fixture(scope="module")
def seed(assets, tmp_path_factory):
    """TorchTitan's seed checkpoint (one rank, DCP): the weights every run starts from."""
    dump = tmp_path_factory.mktemp("titan_seed")
    _torchrun(1, _args(assets, dump, 10, 2, 128, "--checkpoint.enable",
                       "--checkpoint.create_seed_checkpoint",
                       "--parallelism.data_parallel_shard_degree", "1"),
              done="Created seed checkpoint")
    path = os.path.join(dump, "checkpoint", "step-0")
    assert os.path.isdir(path)
    return path


def _dump_with_seed(seed, path):
    os.makedirs(os.path.join(path, "checkpoint"))
    shutil.copytree(seed, os.path.join(path, "checkpoint", "step-0"))
    return path


@pytest.fixture(scope="module")
def reference(assets, seed, tmp_path_factory):
    """cpu_reference.py's 10 losses for data-parallel degree 2 (global batch 4)."""
    dump = tmp_path_factory.mktemp("titan_ref")
    out = _run([TITAN_PY, os.path.join(EXAMPLES, "cpu_reference.py"), "--dp", "2",
                "--seed_checkpoint", seed, "--", *_args(assets, dump)])
    losses = {int(s): float(v) for s, v in REF_LOSS.findall(out)}
    assert sorted(losses) == list(range(1, 11)), out[-4000:]
    return losses


def _assert_close(losses, reference, steps=range(1, 11)):
    assert sorted(losses) == list(steps)
    for step in steps:
        assert math.isclose(losses[step], reference[step], rel_tol=RTOL), (step, losses, reference)


def test_trainer_smoke(assets, tmp_path):
    """One rank, two steps: the Trainer starts on tpu, FlexAttention included, and trains."""
    losses = _torchrun(1, _args(assets, tmp_path, 2, 1, 64))
    assert sorted(losses) == [1, 2]
    assert all(math.isfinite(v) and 0 < v < 20 for v in losses.values()), losses


@pytest.mark.slow
def test_fsdp2_matches_cpu(assets, seed, reference, tmp_path):
    """FSDP2 over 2 ranks, selective activation checkpointing (TorchTitan's default)."""
    losses = _torchrun(2, _args(assets, _dump_with_seed(seed, tmp_path), 10, 2, 128,
                                "--checkpoint.enable"))
    _assert_close(losses, reference)
    assert losses[10] < losses[1] - 1.0


@pytest.mark.slow
def test_fsdp2_tp_matches_cpu(assets, seed, reference, tmp_path):
    """FSDP2 x TP: 4 ranks (2 x 2), loss parallel on, full activation checkpointing."""
    losses = _torchrun(4, _args(assets, _dump_with_seed(seed, tmp_path), 10, 2, 128,
                                "--checkpoint.enable",
                                "--parallelism.data_parallel_shard_degree", "2",
                                "--parallelism.tensor_parallel_degree", "2",
                                "--activation_checkpoint.mode", "full"))
    _assert_close(losses, reference)


@pytest.mark.slow
def test_compile_tpu_backend_matches_cpu(assets, seed, reference, tmp_path):
    """`--compile.enable --compile.backend tpu`: each block and the loss compiled."""
    losses = _torchrun(2, _args(assets, _dump_with_seed(seed, tmp_path), 10, 2, 128,
                                "--checkpoint.enable", "--compile.enable",
                                "--compile.backend", "tpu"))
    _assert_close(losses, reference)


@pytest.mark.slow
def test_dcp_save_and_resume(assets, seed, tmp_path):
    """DCP checkpoints every 5 steps; a second run from step 5's checkpoint (model,
    optimizer, LR schedule, dataloader position) repeats steps 6..10 exactly."""
    dump = _dump_with_seed(seed, tmp_path)
    args = _args(assets, dump, 10, 2, 128, "--checkpoint.enable", "--checkpoint.interval", "5")
    first = _torchrun(2, args)
    ckpt = os.path.join(dump, "checkpoint")
    assert {"step-5", "step-10"} <= set(os.listdir(ckpt))
    shutil.rmtree(os.path.join(ckpt, "step-10"))
    resumed = _torchrun(2, args)
    assert sorted(resumed) == list(range(6, 11))
    for step in range(6, 11):
        assert math.isclose(resumed[step], first[step], rel_tol=1e-5), (step, first, resumed)

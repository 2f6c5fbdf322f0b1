"""Hugging Face `from_pretrained(local_dir, tp_plan="auto")` on tpu under torchrun
(tests/distributed/workers/hf_tensor_parallel.py): transformers maps device tpu to
the `tpu_dist` backend, shards the tiny Llama over 2 processes, and the logits
equal the single-device model's on the CPU."""
import os
import subprocess
import sys

from _torchrun import HERE, ROOT, assert_ok, torchrun

WORKER = os.path.join(HERE, "workers", "hf_tensor_parallel.py")


def test_from_pretrained_tp_plan_auto_matches_single_device(tmp_path):
    model_dir = str(tmp_path / "tiny_llama")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, WORKER, "--save", model_dir], check=True, env=env,
                   timeout=300, capture_output=True)
    rc, out = torchrun(WORKER, nproc=2, mode="defer_and_fuse", args=[model_dir])
    assert_ok(rc, out, ["rank 0: HF TP OK", "rank 1: HF TP OK"])

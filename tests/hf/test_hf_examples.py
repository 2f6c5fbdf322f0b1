"""examples/llama and examples/qwen: --check trains a few steps on tpu and on the CPU
from the same weights (BPE tokenizer trained on the shipped corpus) and asserts that
the losses agree; a short run trains, then generates with a KV cache."""
import os

import pytest

from conftest import run_python

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(script, *flags, timeout=400):
    code = (f"import sys, runpy; sys.argv = [{script!r}, *{list(flags)!r}]; "
            f"runpy.run_path({os.path.join(ROOT, script)!r}, run_name='__main__')")
    res = run_python(code, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def test_llama_example_check_matches_cpu():
    out = _run("examples/llama/train.py", "--check", "--mode", "strict_eager", "--width", "64",
               "--steps", "2", "--seq", "32", "--vocab", "300")
    assert "check passed: 2 steps on tpu match the CPU" in out


@pytest.mark.slow
def test_llama_example_jax_kernels_check_matches_cpu():
    # --kernels jax: the fused RMSNorm + matmul JAX kernel against the stock model on the CPU.
    pytest.importorskip("jax")
    out = _run("examples/llama/train.py", "--check", "--kernels", "jax", "--width", "64",
               "--steps", "2", "--seq", "32", "--vocab", "300")
    assert "kernels jax" in out and "check passed: 2 steps on tpu match the CPU" in out


@pytest.mark.slow
def test_qwen_example_trains_and_generates():
    out = _run("examples/qwen/train.py", "--steps", "6", "--width", "64", "--seq", "32",
               "--vocab", "300", "--new-tokens", "4", "--mode", "strict_eager")
    assert "training tokens/s" in out and "decode" in out and "sample: A grey heron" in out


@pytest.mark.slow
def test_qwen_example_check_compiled_matches_cpu():
    out = _run("examples/qwen/train.py", "--check", "--mode", "compile", "--width", "64",
               "--steps", "2", "--seq", "32", "--vocab", "300")
    assert "check passed" in out

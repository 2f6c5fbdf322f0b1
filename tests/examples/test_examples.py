"""The examples run and check themselves against CPU in every execution mode;
ResNet learns its image set, DLRM beats a constant predictor on held-out logs, the
diffusion model's loss falls and it writes its figure.

Each runs as a script in a fresh interpreter, as a user runs it. Tiny settings keep
each run to seconds on the CPU PJRT plugin (most of it compiling)."""
import math
import os
import re

import pytest

from conftest import run_python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = {"mingpt": ["--width", "32", "--depth", "1", "--heads", "2", "--context", "16",
                   "--batch", "4"],
        "resnet": ["--width", "4", "--depth", "2", "--image-size", "8", "--batch", "8"],
        "dlrm": ["--tables", "1000,100,10", "--dim", "8", "--batch", "16", "--test-logs", "64"],
        "unet": ["--width", "8", "--image-size", "8", "--timesteps", "10", "--batch", "2",
                 "--train-images", "16", "--attn-res", "4"]}
MODES = ["strict_eager", "defer_and_fuse", "compile"]


def script(example, *flags, timeout=900, ok=True):
    code = (f"import sys, runpy; sys.argv = {[example] + list(flags)!r}; "
            f"runpy.run_path({os.path.join(ROOT, 'examples', example, 'train.py')!r}, "
            f"run_name='__main__')")
    p = run_python(code, timeout=timeout)
    if ok:
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        return p.stdout
    return p


# Every example in every mode, at the smallest sizes that still exercise each part
# of the model (most of each run is compiling, which the sizes barely change).
@pytest.mark.parametrize("example,mode", [(e, m) for e in TINY for m in MODES])
def test_check_agrees_with_cpu(example, mode):
    out = script(example, "--check", "--check-steps", "2", "--mode", mode, *TINY[example])
    assert "check: OK" in out, out


# --mode inductor: torch.compile(model) with the default backend (docs/compile.md).
@pytest.mark.parametrize("example", ["mingpt", *(pytest.param(e, marks=pytest.mark.slow)
                                                 for e in TINY if e != "mingpt")])
def test_check_agrees_with_cpu_default_backend(example):
    out = script(example, "--check", "--check-steps", "2", "--mode", "inductor", *TINY[example])
    assert "check: OK" in out, out


# --attention pallas: the Pallas attention kernel (a jax_op) on the device against
# PyTorch's attention on the CPU; fused (Defer & Fuse) by default, and compiled with
# backend="tpu" and with the default backend.
@pytest.mark.parametrize("mode", ["defer_and_fuse", *(pytest.param(m, marks=pytest.mark.slow)
                                                       for m in ("compile", "inductor"))])
def test_mingpt_pallas_attention_check_agrees_with_cpu(mode):
    pytest.importorskip("jax")
    out = script("mingpt", "--check", "--check-steps", "2", "--attention", "pallas", "--mode",
                 mode, *TINY["mingpt"])
    assert "attention pallas" in out and "check: OK" in out, out


@pytest.mark.parametrize("example,amp", [("mingpt", "bf16"), ("resnet", "fp16"), ("dlrm", "bf16"),
                                         ("unet", "bf16")])
def test_amp_check_agrees_with_cpu_autocast(example, amp):
    # --amp: the device under autocast (fp16 with a GradScaler) against CPU autocast.
    out = script(example, "--check", "--check-steps", "2", "--amp", amp, *TINY[example])
    assert f"amp {amp}" in out and "check: OK" in out, out


def test_resnet_loss_falls_well_below_chance():
    # 16x16 images: at 8x8 the fine stripes alias and a short run barely learns.
    out = script("resnet", "--steps", "40", "--quiet", "--train-images", "512",
                 "--test-images", "128", "--width", "8", "--depth", "2", "--image-size", "16",
                 "--batch", "32")
    held_out = float(re.search(r"eval: loss ([\d.]+)", out).group(1))
    assert held_out < 0.5 * math.log(10), out  # chance is ln(10) = 2.30


def test_mingpt_trains_and_samples():
    out = script("mingpt", "--steps", "5", "--quiet", "--sample-chars", "8", *TINY["mingpt"])
    assert "tokens/s" in out and "sample" in out, out


def test_dlrm_beats_a_constant_predictor():
    # A fixed seed and a short run: the held-out AUC must clear 0.5 (a constant
    # predictor) by a wide margin, and the log loss must beat the click rate's.
    out = script("dlrm", "--steps", "60", "--quiet", "--batch", "128", "--test-logs", "2048",
                 "--tables", "10000,1000,100,10")
    auc = float(re.search(r"eval: AUC ([\d.]+)", out).group(1))
    loss, const = map(float, re.search(r"log loss ([\d.]+) \(constant predictor ([\d.]+)\)",
                                       out).groups())
    assert auc > 0.70, out
    assert loss < const - 0.05, out
    assert "examples/s" in out, out


def test_dlrm_million_row_table_trains():
    # The default tables, the largest a million rows: a few steps run on tpu.
    out = script("dlrm", "--steps", "3", "--quiet", "--batch", "64", "--test-logs", "128")
    assert "(1000000, 100000" in out and "eval: AUC" in out, out


def test_dlrm_sparse_gradients_are_refused_naming_the_dense_alternative():
    p = script("dlrm", "--sparse", "--steps", "2", "--quiet", *TINY["dlrm"], ok=False)
    assert p.returncode != 0
    assert "sparse embedding gradients" in p.stderr and "sparse=False" in p.stderr, p.stderr[-2000:]
    # The same flag works on PyTorch's CPU backend (where sparse gradients exist).
    out = script("dlrm", "--sparse", "--device", "cpu", "--steps", "2", "--quiet", *TINY["dlrm"])
    assert "eval: AUC" in out, out


def test_unet_loss_falls_and_writes_the_figure(tmp_path):
    png = tmp_path / "samples.png"
    out = script("unet", "--steps", "40", "--quiet", "--samples", "4", "--out", str(png),
                 "--width", "8", "--image-size", "8", "--timesteps", "20", "--batch", "16",
                 "--train-images", "256", "--attn-res", "4", "--lr", "3e-3")
    first, last = map(float, re.search(r"loss ([\d.]+) -> ([\d.]+)", out).groups())
    assert last < 0.6 * first, out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, out

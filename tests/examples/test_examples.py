"""The examples run and check themselves against CPU; ResNet learns its image set.

Each runs as a script in a fresh interpreter, as a user runs it. Tiny settings keep
the whole file to about a minute on the CPU PJRT plugin."""
import math
import os
import re
import sys

import pytest

from conftest import run_python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = {"mingpt": ["--width", "32", "--depth", "1", "--heads", "2", "--context", "16",
                   "--batch", "4"],
        "resnet": ["--width", "4", "--depth", "2", "--image-size", "8", "--batch", "8"]}



def script(example, *flags, timeout=240):
    code = (f"import sys, runpy; sys.argv = {[example] + list(flags)!r}; "
            f"runpy.run_path({os.path.join(ROOT, 'examples', example, 'train.py')!r}, "
            f"run_name='__main__')")
    p = run_python(code, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p.stdout


@pytest.mark.parametrize("example", ["mingpt", "resnet"])
def test_check_agrees_with_cpu(example):
    out = script(example, "--check", "--check-steps", "2", *TINY[example])
    assert "check: OK" in out, out


@pytest.mark.parametrize("example,amp", [("mingpt", "bf16"), ("resnet", "fp16")])
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

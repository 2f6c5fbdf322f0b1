"""A long compile prints one line naming the program and its time
(TORCH_TPU_COMPILE_LOG_SECONDS, csrc/engine/compile_progress.h); quick ones and a
threshold of 0 print nothing."""
from conftest import run_python

CODE = """
import torch, torch_tpu
x = torch.randn(7, 5).to("tpu")
print(float((x.sin() * 3).sum().cpu()))
"""


def _run(seconds, tmp_path):
    env = {"TORCH_TPU_COMPILE_LOG_SECONDS": seconds, "TORCH_TPU_CACHE_DIR": str(tmp_path)}
    r = run_python(CODE, env=env)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stderr.splitlines() if ln.startswith("torch_tpu: ") and "compil" in ln]


def test_a_compile_longer_than_the_threshold_prints_its_name_and_time(tmp_path):
    # Every compile takes longer than a nanosecond: each ends with a line.
    lines = _run("1e-9", tmp_path / "a")
    done = [ln for ln in lines if " compiled in " in ln]
    assert done and any("aten::sin" in ln for ln in done), lines


def test_no_lines_at_zero_or_for_quick_compiles(tmp_path):
    assert _run("0", tmp_path / "b") == []
    assert _run("3600", tmp_path / "c") == []

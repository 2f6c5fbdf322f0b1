"""benchmarks/serving.py --quick and benchmarks/serving_soak.py --minutes 0.5 run to the
end and report sane figures (no timing is asserted)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.mark.slow
def test_serving_benchmark_quick(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "serving.py"), "--quick",
                           "--model-dir", str(tmp_path / "model"), "--json", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert set(results) == {"plugin", "plugin-compiled", "vllm-cpu", "hf-tpu", "hf-cpu"}
    for row, r in results.items():
        assert r["tokens_per_s"] > 0, row
    for row in ("plugin", "plugin-compiled", "vllm-cpu"):
        for ttft, tpot in results[row]["online"].values():
            assert ttft > 0 and tpot > 0, row
    assert proc.stdout.count("\n| ") == 6  # header + 5 rows (the separator starts "|-")


@pytest.mark.slow
def test_serving_soak_half_minute(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "serving_soak.py"), "--quick",
                           "--minutes", "0.5", "--clients", "8",
                           "--model-dir", str(tmp_path / "model"),
                           "--log", str(tmp_path / "server.log")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "errors=0 mismatches=0 incomplete=0" in proc.stdout

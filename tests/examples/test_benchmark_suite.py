"""benchmarks/run_all.py --smoke writes the JSON with every row (no timing asserts)."""
import json
import os

from conftest import run_python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))



def test_smoke_suite_writes_every_row(tmp_path):
    out = tmp_path / "bench.json"
    code = (f"import sys, runpy; sys.argv = ['run_all.py', '--smoke', '--json', {str(out)!r}]; "
            f"runpy.run_path({os.path.join(ROOT, 'benchmarks', 'run_all.py')!r}, "
            f"run_name='__main__')")
    p = run_python(code, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    data = json.loads(out.read_text())
    rows = {(r["model"], r["step"], r["mode"]): r for r in data["rows"]}
    modes = ("strict_eager", "defer_and_fuse", "compiled", "cpu_eager", "cpu_inductor")
    assert set(rows) == {(m, k, mode) for m in ("mingpt", "resnet") for k in ("train", "train_bf16", "infer")
                         for mode in modes}
    for key, r in rows.items():
        if key[2] == "cpu_inductor":
            assert "error" in r or "median_s" in r  # skipped with a reason by --smoke
            continue
        assert "error" not in r, (key, r)
        assert r["median_s"] > 0 and r["first_s"] > 0 and r["gflops"] > 0, (key, r)
        if key[2] != "cpu_eager":
            assert r["peak_mib"] > 0 and r["cpu_fallback_ops"] == 0, (key, r)
    assert data["matmul_peak_flops"]["tpu"] > 0
    assert "| mingpt | train | defer_and_fuse |" in p.stdout
    assert "| resnet | train_bf16 | compiled |" in p.stdout

"""benchmarks/run_all.py --smoke writes the JSON with every row it plans and the PNG
chart (no timing asserts)."""
import json
import os

from conftest import run_python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODELS = ("mingpt", "resnet", "dlrm", "unet", "llama", "qwen")


def smoke(tmp_path, *flags, timeout=900):
    out = tmp_path / "bench.json"
    argv = ["run_all.py", "--smoke", "--json", str(out), *flags]
    code = (f"import sys, runpy; sys.argv = {argv!r}; "
            f"runpy.run_path({os.path.join(ROOT, 'benchmarks', 'run_all.py')!r}, "
            f"run_name='__main__')")
    p = run_python(code, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p, json.loads(out.read_text()), tmp_path / "bench.png"


def test_smoke_suite_writes_every_row(tmp_path):
    # All six models, every step they have; the modes that cost least to compile
    # (the full list is the same code path, one mode name more each).
    modes = ("defer_and_fuse", "cpu_eager", "cpu_inductor")
    p, data, png = smoke(tmp_path, "--modes", ",".join(modes))
    rows = {(r["model"], r["step"], r["mode"], r["precision"]): r for r in data["rows"]}
    expected = set()
    for m in MODELS:
        for k in ("train", "infer") + (("decode",) if m in ("llama", "qwen") else ()):
            for mode in modes:
                for x in ("fp32", "bf16"):
                    expected.add((m, k, mode, x))
    assert set(rows) == expected
    for key, r in rows.items():
        if key[2] == "cpu_inductor":
            assert "skipped" in r["error"], (key, r)  # skipped with a reason by --smoke
            continue
        assert "error" not in r, (key, r)
        assert r["median_s"] > 0 and r["first_s"] > 0 and r["throughput"] > 0, (key, r)
        assert r["gflops"] > 0, (key, r)
        if key[2] != "cpu_eager":
            assert r["peak_mib"] > 0 and r["cpu_fallback_ops"] == 0, (key, r)
    assert data["matmul_peak_flops"]["tpu"] > 0
    assert "| llama | decode | defer_and_fuse | fp32 |" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_smoke_kinds_and_bf16_compiled(tmp_path):
    # --kinds picks the steps; a bf16 (autocast) training step compiled by
    # torch.compile(backend="tpu") runs without falling back to the CPU.
    p, data, _ = smoke(tmp_path, "--models", "resnet,llama", "--modes", "compiled",
                       "--kinds", "train", "--precisions", "bf16", "--all-bf16")
    rows = {(r["model"], r["step"], r["mode"], r["precision"]): r for r in data["rows"]}
    assert set(rows) == {(m, "train", "compiled", "bf16") for m in ("resnet", "llama")}
    for key, r in rows.items():
        assert "error" not in r and r["median_s"] > 0, (key, r)
        assert r["cpu_fallback_ops"] == 0, (key, r)
    assert "| resnet | train | compiled | bf16 |" in p.stdout


def test_smoke_modes_on_one_model(tmp_path):
    # Strict Eager and compiled beside the baseline, for one model.
    _, data, _ = smoke(tmp_path, "--models", "mingpt", "--modes",
                       "strict_eager,compiled,cpu_eager", "--precisions", "fp32")
    rows = {(r["step"], r["mode"]): r for r in data["rows"]}
    assert set(rows) == {(k, m) for k in ("train", "infer")
                         for m in ("strict_eager", "compiled", "cpu_eager")}
    for key, r in rows.items():
        assert "error" not in r and r["median_s"] > 0, (key, r)
        if key[1] != "cpu_eager":
            assert r["cpu_fallback_ops"] == 0 and r["x_cpu_eager"] > 0, (key, r)

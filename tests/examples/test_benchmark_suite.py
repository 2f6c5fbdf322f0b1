"""benchmarks/run_all.py --smoke writes the JSON with every row it plans and the PNG
chart (no timing asserts)."""
import argparse
import json
import os
import runpy

import pytest

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


def every_row(tmp_path, models):
    # Every step the models have; the modes that cost least to compile (the full list
    # is the same code path, one mode name more each).
    modes = ("defer_and_fuse", "cpu_eager", "cpu_inductor")
    p, data, png = smoke(tmp_path, "--models", ",".join(models), "--modes", ",".join(modes),
                         "--all-bf16")
    rows = {(r["model"], r["step"], r["mode"], r["precision"]): r for r in data["rows"]}
    expected = set()
    for m in models:
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
        assert r["gflops"] > 0 and r["wall_s"] > 0, (key, r)
        if key[2] != "cpu_eager":
            assert r["peak_mib"] > 0 and r["cpu_fallback_ops"] == 0, (key, r)
    assert data["matmul_peak_flops"]["tpu"] > 0 and data["matmul_peak_flops"]["cpu"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return p


def test_smoke_suite_writes_every_row(tmp_path):
    # A model of the examples and a Hugging Face one (with its decode step); all six
    # are the slow test below.
    p = every_row(tmp_path, ("dlrm", "llama"))
    assert "| llama | decode | defer_and_fuse | fp32 |" in p.stdout


@pytest.mark.slow
def test_smoke_suite_writes_every_row_of_all_six_models(tmp_path):
    every_row(tmp_path, MODELS)


def test_quick_plan_covers_every_model_in_every_mode():
    # --quick's plan (nothing run): each model in the three tpu modes and CPU eager,
    # float32; a bf16 row; what it leaves out is in the table with the reason.
    run_all = runpy.run_path(os.path.join(ROOT, "benchmarks", "run_all.py"))
    args = argparse.Namespace(models=MODELS, kinds=("train", "infer", "decode"),
                              modes=("strict_eager", "defer_and_fuse", "compiled",
                                     "cpu_eager", "cpu_inductor"),
                              precisions=("fp32", "bf16"), size="quick", inductor=False,
                              all_bf16=False, all_compiled=False)
    cal, rows, skipped = run_all["plan"](args)
    assert set(cal) == {"tpu", "cpu"}
    planned = {(j["model"], j["kind"], j["mode"], j["precision"]) for j in rows}
    for m in MODELS:
        for mode in ("strict_eager", "defer_and_fuse", "compiled", "cpu_eager"):
            assert (m, "train", mode, "fp32") in planned, (m, mode)
        assert (m, "train", "defer_and_fuse", "bf16") in planned, m
    assert ("llama", "decode", "defer_and_fuse", "fp32") in planned
    reasons = [json.loads(k) | {"why": v} for k, v in skipped.items()]
    assert {r["mode"] for r in reasons} == {"cpu_inductor", "compiled"}
    assert all("--quick" in r["why"] for r in reasons)
    # The full suite leaves nothing out: every step of every model, five modes, two precisions.
    args.size = "full"
    _, rows, skipped = run_all["plan"](args)
    steps = sum(3 if m in ("llama", "qwen") else 2 for m in MODELS)
    assert not skipped and len(rows) == steps * 5 * 2


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

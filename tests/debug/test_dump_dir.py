"""TORCH_TPU_DUMP_DIR / torch_tpu.debug.set_dump_dir: each program's StableHLO and
a JSON describing it."""
import json
import os

import torch
import torch_tpu

from conftest import run_python


def read_dump(d):
    jsons = sorted(f for f in os.listdir(d) if f.endswith(".json"))
    return [json.load(open(os.path.join(d, f))) for f in jsons]


def test_set_dump_dir_writes_mlir_and_json(tmp_path):
    x = torch.randn(3, 5).to("tpu")
    torch_tpu.cache.clear(memory=True, disk=False)     # so that the op gets a program again
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        assert torch_tpu.debug.dump_dir() == str(tmp_path)
        (x * x.sum()).cpu()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    assert torch_tpu.debug.dump_dir() is None
    records = read_dump(tmp_path)
    assert records
    for r in records:
        assert set(r) >= {"what", "key", "source", "seconds", "inputs", "outputs", "num_outputs"}
        assert r["source"] in ("compile", "disk") and r["seconds"] >= 0
        assert len(r["outputs"]) == r["num_outputs"]
        mlir = (tmp_path / (r["key"] + ".mlir")).read_text()
        assert "func.func public @main(" in mlir
        for t in r["inputs"] + r["outputs"]:
            assert t.startswith("tensor<") and t in mlir
    mul = [r for r in records if r["what"].startswith("aten::mul")]
    assert mul and all(t.endswith("xf32>") or t == "tensor<f32>" for t in mul[0]["inputs"])
    # Stopped: nothing more is written.
    n = len(os.listdir(tmp_path))
    torch_tpu.cache.clear(memory=True, disk=False)
    (x + 2).cpu()
    assert len(os.listdir(tmp_path)) == n


def test_environment_variable_dumps_from_import(tmp_path):
    r = run_python("""
        import torch, torch_tpu
        (torch.ones(4, device="tpu") * 3).cpu()
    """, env={"TORCH_TPU_DUMP_DIR": str(tmp_path / "dumps"), "TORCH_TPU_CACHE": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    records = read_dump(tmp_path / "dumps")
    assert any(rec["source"] == "compile" and rec["what"].startswith("aten::mul")
               for rec in records), records

"""benchmarks/peers.py on our own modes only (CI has no peer environments): the tiny
GPT's losses agree with PyTorch CPU eager, the table and JSON are written, and a peer
whose environment is missing is a row saying how to make it (no timing asserts)."""
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "benchmarks", "peers.py")
TINY = ["--layers", "1", "--width", "32", "--heads", "2", "--context", "16", "--batch", "2"]


def peers(*flags, timeout=300):
    p = subprocess.run([sys.executable, SCRIPT, *flags], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


def test_help_lists_every_mode():
    out = peers("--help").stdout
    for mode in ("strict_eager", "defer_and_fuse", "compiled", "cpu_eager", "xla_eager",
                 "xla_lazy", "xla_compiled", "jax_jit", "--setup"):
        assert mode in out


def test_unknown_mode_is_a_clear_error():
    p = subprocess.run([sys.executable, SCRIPT, "--modes", "nope"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "unknown mode(s) nope" in p.stderr


def test_tiny_run_losses_agree_and_missing_peer_is_a_row(tmp_path):
    out = tmp_path / "peers"
    p = peers("--modes", "defer_and_fuse,cpu_eager,jax_jit", "--kinds", "train", "--steps", "2",
              "--warmup", "2", "--peers-dir", str(tmp_path / "none"), "--out", str(out), *TINY)
    data = json.loads((tmp_path / "peers.json").read_text())
    rows = data["results"]["train"]
    for mode in ("defer_and_fuse", "cpu_eager"):
        r = rows[mode]
        assert "error" not in r, r
        assert len(r["losses"]) == 4 and len(r["times"]) == 2 and r["median"] > 0
    # Same initial weights and batch, same AdamW: the losses of all four steps agree,
    # and training moves them.
    assert rows["defer_and_fuse"]["loss_gap"] < 1e-4
    assert rows["cpu_eager"]["losses"][-1] < rows["cpu_eager"]["losses"][0]
    assert "--setup" in rows["jax_jit"]["error"]
    table = (tmp_path / "peers.md").read_text()
    assert "| train | defer_and_fuse |" in table and "| train | jax_jit | error: no " in table
    assert table.strip() in p.stdout

"""benchmarks/peers.py on our own modes only (CI has no peer environments): the tiny
GPT's losses agree with PyTorch CPU eager, the table and JSON are written, and a peer
whose environment is missing is a row saying how to make it (no timing asserts)."""
import json
import os
import subprocess
import sys

import pytest

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
                 "xla_lazy", "xla_compiled", "jax_jit", "google_defer_never",
                 "google_defer_and_fuse", "google_launch_blocking", "google_compiled", "--setup"):
        assert mode in out


def test_unknown_mode_is_a_clear_error():
    p = subprocess.run([sys.executable, SCRIPT, "--modes", "nope"], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
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
        assert len(r["cpus"]) == 2 and all(c > 0 for c in r["cpus"])
    # Same initial weights and batch, same AdamW: the losses of all four steps agree,
    # and training moves them.
    assert rows["defer_and_fuse"]["loss_gap"] < 1e-4
    assert rows["cpu_eager"]["losses"][-1] < rows["cpu_eager"]["losses"][0]
    assert "--setup" in rows["jax_jit"]["error"]
    table = (tmp_path / "peers.md").read_text()
    assert "| train | defer_and_fuse |" in table and "| train | jax_jit | error: no " in table
    assert table.strip() in p.stdout


# The table's loss column: each row's largest |loss - CPU eager's loss| over its steps.
# Equal to float32 rounding: a few units in the last place of the loss (float32 ulp of
# a loss near ln(65) = 4.17 is 4.8e-7; a compiled or fused program may reassociate).
ULPS = 8


def loss_column(table, kind):
    """{mode: loss difference} from the markdown table's rows of `kind`."""
    out, col = {}, None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "max loss diff vs CPU eager" in cells:  # the header names the column
            col = cells.index("max loss diff vs CPU eager")
        elif col and len(cells) > col and cells[0] == kind and not cells[2].startswith("error"):
            out[cells[1]] = float(cells[col])
    return out


def assert_losses_equal_to_float32_rounding(tmp_path, modes, peers_dir=None, timeout=600):
    import numpy as np
    flags = ["--modes", ",".join(modes + ["cpu_eager"]), "--kinds", "train,infer",
             "--steps", "2", "--warmup", "2", "--out", str(tmp_path / "peers"), *TINY]
    if peers_dir:
        flags += ["--peers-dir", peers_dir]
    peers(*flags, timeout=timeout)
    data = json.loads((tmp_path / "peers.json").read_text())
    table = (tmp_path / "peers.md").read_text()
    for kind in ("train", "infer"):
        rows = data["results"][kind]
        column = loss_column(table, kind)
        for mode in modes:
            assert "error" not in rows[mode], rows[mode]
            assert mode in column, table
            ref = max(abs(v) for v in rows["cpu_eager"]["losses"])
            bound = ULPS * float(np.spacing(np.float32(ref)))
            assert column[mode] <= bound, (kind, mode, column[mode], bound)
            # The column is the JSON's figure, printed to 3 significant digits.
            assert abs(column[mode] - rows[mode]["loss_gap"]) <= 0.01 * rows[mode]["loss_gap"] + 1e-12


def test_loss_column_equal_to_float32_rounding_our_modes(tmp_path):
    assert_losses_equal_to_float32_rounding(tmp_path, ["strict_eager", "defer_and_fuse", "compiled"])


GOOGLE_ENV = os.path.join(ROOT, ".peers", "google_tpu", "bin", "python")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(GOOGLE_ENV),
                    reason="no .peers/google_tpu (benchmarks/peers.py --setup google_tpu "
                           "downloads Google's torch-tpu wheel; CI does not)")
def test_loss_column_equal_to_float32_rounding_google_rows(tmp_path):
    assert_losses_equal_to_float32_rounding(
        tmp_path, ["strict_eager", "google_defer_never", "google_defer_and_fuse"],
        peers_dir=os.path.join(ROOT, ".peers"), timeout=1200)

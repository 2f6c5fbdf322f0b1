"""minGPT under FSDP2 on tpu (examples/distributed/fsdp_mingpt.py: fully_shard per
block, meta-device init then to_empty): gathered parameters after several AdamW
steps equal one CPU process; a DCP checkpoint of the sharded model and optimizer
saved at world size 2 loads at world sizes 4 and 1."""
import os

import pytest

from _torchrun import ROOT, assert_ok, torchrun

SCRIPT = os.path.join(ROOT, "examples", "distributed", "fsdp_mingpt.py")
SMALL = ["--width", "32", "--depth", "2", "--context", "16", "--check-steps", "3"]


def test_fsdp2_check_and_dcp_save_then_load_at_4_and_1(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    rc, out = torchrun(SCRIPT, nproc=2, mode="strict_eager",
                       args=SMALL + ["--mode", "strict_eager", "--check", "--save", ckpt])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK", "rank 0: saved"])
    rc, out = torchrun(SCRIPT, nproc=4, mode="strict_eager",
                       args=SMALL + ["--mode", "strict_eager", "--load", ckpt])
    assert_ok(rc, out, [f"rank {r}: load OK at world size 4" for r in range(4)])
    rc, out = torchrun(SCRIPT, nproc=1, mode="strict_eager",
                       args=SMALL + ["--mode", "strict_eager", "--load", ckpt])
    assert_ok(rc, out, ["rank 0: load OK at world size 1"])


@pytest.mark.slow
def test_fsdp2_defer_and_fuse():
    rc, out = torchrun(SCRIPT, nproc=2, mode="defer_and_fuse",
                       args=SMALL + ["--mode", "defer_and_fuse", "--check"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK"])

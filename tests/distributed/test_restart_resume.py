"""Fault tolerance under torchrun: one rank of an FSDP2 training run on tpu dies mid-run
(as if killed), torchrun restarts the job (--max-restarts 1), it resumes from the newest
DCP checkpoint, and it ends with exactly the parameters of a run that was never
interrupted (examples/distributed/fsdp_resume.py)."""
import os

import torch

from _torchrun import ROOT, assert_ok, torchrun

SCRIPT = os.path.join(ROOT, "examples", "distributed", "fsdp_resume.py")
SMALL = ["--width", "32", "--depth", "2", "--context", "16", "--steps", "6", "--ckpt-every", "2",
         "--mode", "strict_eager"]


def test_killed_rank_restarts_from_checkpoint_and_ends_bit_identical(tmp_path):
    whole, resumed = tmp_path / "whole.pt", tmp_path / "resumed.pt"
    rc, out = torchrun(SCRIPT, nproc=2, args=SMALL + ["--ckpt-dir", tmp_path / "a",
                                                       "--final", whole])
    assert_ok(rc, out, ["rank 0: done after attempt 0", "rank 1: done after attempt 0"])
    # Rank 1 dies at step 3, after the checkpoint of step 2 and before that of step 4.
    rc, out = torchrun(SCRIPT, nproc=2, max_restarts=1, timeout=600,
                       args=SMALL + ["--ckpt-dir", tmp_path / "b", "--final", resumed,
                                     "--fail-at", "3"])
    assert_ok(rc, out, ["rank 1: dying at step 3", "rank 0: attempt 1 resumed from step 2",
                        "rank 1: attempt 1 resumed from step 2", "rank 0: done after attempt 1"])
    want, got = torch.load(whole), torch.load(resumed)
    assert want.keys() == got.keys()
    for name in want:
        assert torch.equal(want[name], got[name]), name

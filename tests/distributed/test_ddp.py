"""minGPT under DistributedDataParallel on tpu (examples/distributed/ddp_mingpt.py
--check): parameters after several AdamW steps equal one CPU process trained on
the same global batches."""
import os

import pytest

from _torchrun import ROOT, assert_ok, torchrun

SCRIPT = os.path.join(ROOT, "examples", "distributed", "ddp_mingpt.py")
SMALL = ["--width", "32", "--depth", "1", "--context", "16", "--check", "--check-steps", "3"]


def test_ddp_no_sync_accumulation_and_comm_hook():
    rc, out = torchrun(SCRIPT, nproc=2, mode="defer_and_fuse",
                       args=SMALL + ["--mode", "defer_and_fuse", "--accum", "2",
                                     "--comm-hook", "allreduce"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK",
                        "parameters equal the single-process CPU run"])


@pytest.mark.slow
def test_ddp_strict_eager_builtin_allreduce():
    rc, out = torchrun(SCRIPT, nproc=2, mode="strict_eager", args=SMALL + ["--mode", "strict_eager"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK"])

"""minGPT with DTensor tensor parallelism on tpu (examples/distributed/tp_mingpt.py
--check: ColwiseParallel / RowwiseParallel linears, sequence-parallel norms):
gathered parameters after several AdamW steps equal one CPU process."""
import os

import pytest

from _torchrun import ROOT, assert_ok, torchrun

SCRIPT = os.path.join(ROOT, "examples", "distributed", "tp_mingpt.py")
SMALL = ["--width", "32", "--depth", "1", "--context", "16", "--check", "--check-steps", "3"]


def test_tensor_parallel_strict_eager():
    rc, out = torchrun(SCRIPT, nproc=2, mode="strict_eager", args=SMALL + ["--mode", "strict_eager"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK"])


@pytest.mark.slow
def test_tensor_parallel_defer_and_fuse():
    rc, out = torchrun(SCRIPT, nproc=2, mode="defer_and_fuse",
                       args=SMALL + ["--mode", "defer_and_fuse"])
    assert_ok(rc, out, ["rank 0: check OK", "rank 1: check OK"])

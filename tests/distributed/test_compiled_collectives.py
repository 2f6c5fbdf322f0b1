"""torch.distributed._functional_collectives inside torch.compile(backend="tpu")
under torchrun (tests/distributed/workers/compiled_collectives.py): one graph with
no graph break, values equal to eager and to the CPU reference, gradients
through the autograd collectives, and no deadlock when ranks materialise
differently. Host-staged collectives are boundaries inside the backend's
graph runner, not Dynamo graph breaks."""
import pytest

from _torchrun import assert_ok, torchrun


def _run(nproc, mode):
    rc, out = torchrun("compiled_collectives.py", nproc=nproc, mode=mode)
    assert_ok(rc, out, [f"rank {r}: COMPILED CHECKS PASSED" for r in range(nproc)])


def test_compiled_functional_collectives_defer_and_fuse():
    _run(2, "defer_and_fuse")


@pytest.mark.slow
def test_compiled_functional_collectives_strict_eager():
    _run(2, "strict_eager")


@pytest.mark.slow
def test_compiled_functional_collectives_four_processes():
    _run(4, "defer_and_fuse")

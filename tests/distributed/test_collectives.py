"""The tpu process group under torchrun on loopback: every collective, reduce op
and dtype against CPU-computed values, subgroups, Work/Future semantics and
functional collectives (tests/distributed/workers/collectives.py), in both
execution modes; error propagation (workers/errors.py)."""

import pytest

from _torchrun import assert_ok, torchrun


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"], ids=["eager", "fused"])
def test_collectives_two_processes(mode):
    rc, out = torchrun("collectives.py", nproc=2, mode=mode)
    assert_ok(rc, out, ["rank 0: CHECKS PASSED", "rank 1: CHECKS PASSED"])


def test_collectives_four_processes_with_mesh():
    rc, out = torchrun("collectives.py", nproc=4, mode="defer_and_fuse")
    assert_ok(rc, out, [f"rank {r}: CHECKS PASSED" for r in range(4)])


@pytest.mark.slow
def test_collectives_four_processes_eager():
    rc, out = torchrun("collectives.py", nproc=4, mode="strict_eager")
    assert_ok(rc, out, [f"rank {r}: CHECKS PASSED" for r in range(4)])


def test_a_failing_rank_gives_errors_not_hangs():
    rc, out = torchrun("errors.py", nproc=2, timeout=300)
    assert rc != 0, out[-4000:]
    assert "TIMEOUT_ERROR_OK" in out, out[-6000:]   # a collective nobody joins times out
    assert "rank 1 fails on purpose" in out, out[-6000:]
    assert "PEER_ERROR_OK" in out, out[-6000:]      # the survivor's collective fails


# The staged path (TORCH_TPU_DIST_IN_PLACE=0: no reduction on the device buffer
# itself, as on platforms whose device memory is not host memory). Unpieced
# messages read the CPU plugin's buffer in place (one memcpy); with
# TORCH_TPU_DIST_HOST_VIEW=0 through PJRT's copy, as other platforms do.
@pytest.mark.parametrize("host_view", ["1", "0"], ids=["read_in_place", "pjrt_copies"])
def test_host_staging_pieces_pool_and_aliased_results(host_view):
    rc, out = torchrun("staging.py", nproc=2, mode="defer_and_fuse",
                       env={"TORCH_TPU_DIST_PIECE_MB": "1", "TORCH_TPU_DIST_HOST_VIEW": host_view,
                            "TORCH_TPU_DIST_IN_PLACE": "0"})
    assert_ok(rc, out, ["rank 0: STAGING OK", "rank 1: STAGING OK"])


# The CPU plugin's device memory is host memory: Gloo reduces a tensor's own
# buffer where that is safe (workers/in_place.py), staged otherwise; with
# TORCH_TPU_DIST_IN_PLACE=0 every case is staged and the values stay right.
@pytest.mark.parametrize("mode,in_place", [("strict_eager", "1"), ("defer_and_fuse", "1"),
                                           ("defer_and_fuse", "0")],
                         ids=["eager", "fused", "fused_staged_only"])
def test_allreduce_in_place_on_device_memory_or_staged(mode, in_place):
    rc, out = torchrun("in_place.py", nproc=2, mode=mode, env={"TORCH_TPU_DIST_IN_PLACE": in_place})
    assert_ok(rc, out, ["rank 0: IN PLACE OK", "rank 1: IN PLACE OK"])

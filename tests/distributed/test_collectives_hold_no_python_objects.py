"""A tpu collective's work holds none of the Python objects stashed in the poster's
thread-local state (workers/python_objects_in_works.py says why: with them, DDP's
group teardown deadlocked under load)."""
from _torchrun import assert_ok, torchrun

KINDS = ["all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor"]


def test_pending_collectives_hold_no_stashed_python_object():
    rc, out = torchrun("python_objects_in_works.py", nproc=2)
    assert_ok(rc, out, [f"rank {r}: a pending {k} holds 0 reference(s)"
                        for k in KINDS for r in (0, 1)])

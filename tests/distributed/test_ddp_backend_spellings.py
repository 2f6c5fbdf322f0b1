"""DDP on a tpu model under every backend spelling the README lists, including
`init_process_group()` with no backend and `init_device_mesh("tpu", ...)`, whose
groups PyTorch 2.13 gives the default backend type GLOO (see
torch_tpu.distributed._group_with_default); parameters after 3 steps equal a
CPU reference."""
from _torchrun import assert_ok, torchrun

SPELLINGS = ["default", "tpu", "tpu_dist", "cpu:gloo,tpu:tpu", "mesh"]


def test_ddp_under_every_backend_spelling():
    rc, out = torchrun("ddp_backend_spellings.py", nproc=2, args=SPELLINGS)
    assert_ok(rc, out, [f"rank {r}: DDP {s} OK" for s in SPELLINGS for r in (0, 1)])

"""The `tpu` backend is registered by `import torch` alone, under both names,
for the device type tpu, and every way of naming it creates a working group."""
import textwrap

from _torchrun import assert_ok, torchrun
from conftest import run_python


def test_registered_by_import_torch_alone():
    r = run_python("""
        import torch, torch.distributed as dist
        assert "TPU" in dist.Backend._plugins and "TPU_DIST" in dist.Backend._plugins
        assert dist.Backend.default_device_backend_map["tpu"] == "tpu"
        assert dist.Backend.backend_capability["tpu"] == ["tpu"]
        assert dist.Backend.backend_capability["tpu_dist"] == ["tpu"]
        print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


def test_set_device_validates_the_index():
    r = run_python("""
        import torch
        try:
            torch.tpu.set_device(99)
        except RuntimeError as e:
            assert "out of range" in str(e) or "99" in str(e), e
            print("OK")
    """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr


SPECS = textwrap.dedent("""
    import datetime, sys, torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.distributed_c10d import _get_default_group, _world
    for spec in [None, "tpu", "tpu_dist", "cpu:gloo,tpu:tpu"]:
        dist.init_process_group(spec, timeout=datetime.timedelta(seconds=300))
        r, w = dist.get_rank(), dist.get_world_size()
        # No backend named: as on CUDA (where PyTorch 2.13 reports "undefined" with
        # the config "cuda:nccl"), the accelerator's backend alone, and no CPU one.
        want = {None: "undefined"}.get(spec, spec)
        assert dist.get_backend() == want, (spec, dist.get_backend())
        config = str(_world.pg_backend_config[_get_default_group()])
        assert config == {None: "tpu:tpu", "tpu": "tpu:tpu", "tpu_dist": "tpu:tpu_dist",
                          "cpu:gloo,tpu:tpu": "cpu:gloo,tpu:tpu"}[spec], (spec, config)
        t = torch.full((3,), float(r + 1), device="tpu")
        dist.all_reduce(t)
        assert t.cpu().tolist() == [float(w * (w + 1) // 2)] * 3, (spec, t)
        if spec and spec.startswith("cpu:"):
            c = torch.full((2,), float(r + 1))
            dist.all_reduce(c)  # CPU tensors go to Gloo
            assert c.tolist() == [float(w * (w + 1) // 2)] * 2
        assert torch.tpu.current_device() == 0  # CPU plugin: device 0 of the process's client
        dist.destroy_process_group()
    mesh = init_device_mesh("tpu", (2,))  # creates the default group itself
    t = torch.ones(2, device="tpu")
    dist.all_reduce(t, group=mesh.get_group())
    assert t.cpu().tolist() == [2.0, 2.0]
    dist.destroy_process_group()
    print(f"rank {r}: SPECS OK", flush=True)
""")


def test_every_backend_spelling_and_device_mesh(tmp_path):
    script = tmp_path / "specs.py"
    script.write_text(SPECS)
    rc, out = torchrun(str(script), nproc=2)
    assert_ok(rc, out, ["rank 0: SPECS OK", "rank 1: SPECS OK"])

"""Out of memory is torch.OutOfMemoryError naming the request, the bytes in use and the
limit, on every allocation path; the device works afterwards. A byte limit
(TORCH_TPU_MEMORY_LIMIT, torch.tpu.set_memory_limit) and
torch.tpu.set_per_process_memory_fraction apply on every platform, and mem_get_info
reports them. Each case runs in its own process: the limit is process-wide."""
import pytest

from conftest import run_python


def test_huge_allocation_is_out_of_memory_error():
    r = run_python("""
        import torch, torch_tpu
        try:
            torch.empty(2**40, device="tpu")
        except torch.OutOfMemoryError as e:
            assert "Tried to allocate 4096.00 GiB" in str(e) and "limit" in str(e), str(e)
            print("oom")
        assert torch.ones(3, device="tpu").sum().item() == 3.0
    """)
    assert r.returncode == 0 and "oom" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_every_allocation_path_under_a_limit(mode):
    r = run_python(f"""
        import torch, torch_tpu
        torch_tpu.set_execution_mode("{mode}")
        free, total = torch.tpu.mem_get_info()
        assert total == 1 << 20, total
        a = torch.ones(1000, device="tpu")
        paths = {{
            "factory": lambda: torch.zeros(1 << 20, device="tpu"),
            "host_to_device": lambda: torch.randn(1 << 20).to("tpu"),
            "op_output": lambda: a.repeat(1000),
            "two_outputs": lambda: torch.ones(150000, device="tpu") + torch.ones(150000, device="tpu"),
        }}
        for name, f in paths.items():
            try:
                f()
                torch.tpu.synchronize()
                raise SystemExit(name + ": no error")
            except torch.OutOfMemoryError as e:
                msg = str(e)
                assert "Tried to allocate" in msg and "already allocated" in msg, msg
                assert "1.00 MiB limit" in msg, msg
        # The device keeps working and the failed requests left nothing allocated.
        assert (a + 1).sum().item() == 2000.0
        assert torch.tpu.memory_allocated() <= 8000, torch.tpu.memory_allocated()
        free, total = torch.tpu.mem_get_info()
        assert total == 1 << 20 and free == total - torch.tpu.memory_allocated()
        print("ok")
    """, env={"TORCH_TPU_MEMORY_LIMIT": "1MiB"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_per_process_memory_fraction():
    r = run_python("""
        import torch, torch_tpu
        torch.tpu.set_memory_limit(4 << 20)
        torch.tpu.set_per_process_memory_fraction(0.5)
        assert torch.tpu.mem_get_info()[1] == 2 << 20, torch.tpu.mem_get_info()
        x = torch.ones(256 * 1024, device="tpu")  # 1 MiB fits
        try:
            torch.ones(512 * 1024, device="tpu")  # 2 MiB more does not
            raise SystemExit("no error")
        except torch.OutOfMemoryError:
            pass
        try:
            torch.tpu.set_per_process_memory_fraction(1.5)
            raise SystemExit("no error for 1.5")
        except ValueError:
            pass
        torch.tpu.set_per_process_memory_fraction(1.0)
        y = torch.ones(512 * 1024, device="tpu")
        assert (x.sum() + y.sum()).item() == 768 * 1024
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr

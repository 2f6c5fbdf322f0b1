"""Behaviour that needs a fresh interpreter: the entry point, fork, several devices,
TORCH_TPU_LAUNCH_BLOCKING."""
from conftest import run_python


def test_import_torch_alone_registers_tpu():
    r = run_python("""
        import sys, torch
        x = torch.arange(4.0, device="tpu") * 2
        assert "torch_tpu" in sys.modules
        assert torch.tpu.is_available()
        assert torch.accelerator.current_accelerator().type == "tpu"
        print("RESULT", x.cpu().tolist())
    """)
    assert r.returncode == 0, r.stderr
    assert "RESULT [0.0, 2.0, 4.0, 6.0]" in r.stdout


def test_fork_after_init_raises_clear_error():
    # The child runs in its own interpreter so that a hang cannot stall the suite.
    r = run_python("""
        import multiprocessing as mp, torch, torch_tpu

        def child(q):
            try:
                torch.ones(2, device="tpu").sum().item()
                q.put("no error")
            except Exception as e:
                q.put(type(e).__name__ + ": " + str(e))

        if __name__ == "__main__":
            torch.ones(2, device="tpu").sum().item()   # initialise in the parent
            ctx = mp.get_context("fork")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            p.join(300)
            if p.is_alive():
                p.kill()
                print("CHILD HUNG")
            else:
                print("CHILD", q.get(timeout=10))
            # The parent keeps working.
            print("PARENT", torch.ones(3, device="tpu").sum().item())
    """)
    assert r.returncode == 0, r.stderr
    assert "CHILD HUNG" not in r.stdout
    line = [l for l in r.stdout.splitlines() if l.startswith("CHILD")][0]
    assert "RuntimeError" in line, line
    assert "fork" in line and "spawn" in line, line
    assert "PARENT 3.0" in r.stdout


def test_two_cpu_devices():
    r = run_python("""
        import torch, torch_tpu
        assert torch.tpu.device_count() == 2, torch.tpu.device_count()
        a = torch.arange(6.0).reshape(2, 3)
        x0 = a.to("tpu:0")
        x1 = a.to("tpu:1")
        assert x1.device == torch.device("tpu", 1)
        y1 = (x1 * 2 + 1).sum(0)
        assert y1.device == torch.device("tpu", 1), y1.device
        assert torch.equal(y1.cpu(), (a * 2 + 1).sum(0))
        z = x0.to("tpu:1")          # tpu:0 -> tpu:1
        assert z.device.index == 1 and torch.equal(z.cpu(), a)
        w = torch.empty(2, 3, device="tpu:1")
        w.copy_(x0.t().contiguous().t())
        assert torch.equal(w.cpu(), a)
        with torch.tpu.device(1):
            assert torch.tpu.current_device() == 1
            o = torch.ones(2, device="tpu")
            assert o.device.index == 1
        torch.tpu.set_device(1)
        assert torch.zeros(1, device="tpu").device.index == 1
        torch.tpu.set_device(0)
        try:
            x0 + x1
        except RuntimeError as e:
            assert "tpu:0" in str(e) and "tpu:1" in str(e), str(e)
        else:
            raise AssertionError("adding tensors on tpu:0 and tpu:1 did not raise")
        torch.tpu.manual_seed_all(3)
        r0 = torch.rand(8, device="tpu:0").cpu()
        r1 = torch.rand(8, device="tpu:1").cpu()
        torch.tpu.manual_seed_all(3)
        assert torch.equal(torch.rand(8, device="tpu:1").cpu(), r1)
        assert torch.tpu.memory_allocated(1) > 0
        torch.tpu.synchronize(1)
        print("OK")
    """, env={"TORCH_TPU_CPU_DEVICES": "2"})
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout


def test_launch_blocking():
    r = run_python("""
        import torch, torch_tpu
        assert torch_tpu._C._launch_blocking()
        x = torch.arange(6.0, device="tpu").reshape(2, 3)
        y = (x @ x.t()).relu()
        c = torch.arange(6.0).reshape(2, 3)
        assert torch.equal(y.cpu(), (c @ c.t()).relu())
        try:
            torch.ones(2, 3, device="tpu").add(torch.ones(2, 3))
        except RuntimeError as e:
            print("ERROR", e)
        print("DONE")
    """, env={"TORCH_TPU_LAUNCH_BLOCKING": "1"})
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    err = [l for l in r.stdout.splitlines() if l.startswith("ERROR")][0]
    assert "aten::add" in err, err


def test_launch_blocking_off_by_default():
    r = run_python("import torch, torch_tpu; print('BLOCKING', torch_tpu._C._launch_blocking())",
                   env={"TORCH_TPU_LAUNCH_BLOCKING": "0", "TPU_LAUNCH_BLOCKING": "0"})
    assert "BLOCKING False" in r.stdout, r.stderr


def test_import_and_first_op_print_nothing():
    # The PJRT plugin logs through absl on start-up; a user must not see it.
    code = """
        import torch
        x = torch.ones(3, device="tpu")
        print("RESULT", (x + 1).sum().item())
    """
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "RESULT 6.0" in r.stdout
    assert r.stderr == "", r.stderr


def test_log_level_info_shows_the_plugin_log():
    r = run_python("""
        import torch
        print("RESULT", torch.ones(3, device="tpu").sum().item())
    """, env={"TORCH_TPU_LOG_LEVEL": "info"})
    assert r.returncode == 0, r.stderr
    assert "cpu_device_count" in r.stderr


def test_bad_log_level_is_a_clear_error():
    r = run_python("import torch_tpu", env={"TORCH_TPU_LOG_LEVEL": "loud"})
    assert r.returncode != 0
    assert "TORCH_TPU_LOG_LEVEL must be" in r.stderr

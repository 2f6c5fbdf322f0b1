"""Bad inputs raise clear Python exceptions naming the cause (and the fix); none crashes."""
import os

import pytest
import torch
import torch_tpu

from conftest import run_python


def test_mixing_cpu_and_tpu():
    a = torch.ones(2, 3, device="tpu")
    b = torch.ones(2, 3)
    with pytest.raises(RuntimeError) as e:
        a + b
    msg = str(e.value)
    assert "same device" in msg and "cpu" in msg and "tpu" in msg
    assert ".to(" in msg  # says what to do
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(a, b.t())
    with pytest.raises(RuntimeError, match="same device"):
        a.add_(b)
    # A 0-dim CPU tensor is a scalar, as on CUDA.
    assert torch.equal((a + torch.tensor(2.0)).cpu(), torch.full((2, 3), 3.0))
    # The interpreter still works.
    assert (a + a).sum().item() == 12.0


def test_device_index_out_of_range():
    n = torch.tpu.device_count()
    with pytest.raises(RuntimeError) as e:
        torch.ones(2, device=f"tpu:{n + 3}")
    assert "out of range" in str(e.value) and str(n + 3) in str(e.value)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.tpu.set_device(n + 3)
    with pytest.raises(RuntimeError, match="out of range"):
        torch.ones(2).to(f"tpu:{n}")
    with pytest.raises(RuntimeError, match="out of range"):
        torch.tpu.get_device_name(n)
    assert torch.tpu.current_device() == 0


@pytest.mark.parametrize("dtype", [torch.complex32, torch.float8_e8m0fnu])
def test_unsupported_dtype(dtype):
    with pytest.raises(TypeError) as e:
        torch.empty(3, dtype=dtype, device="tpu")
    msg = str(e.value)
    assert "does not support dtype" in msg and "supported:" in msg
    with pytest.raises(TypeError, match="does not support dtype"):
        torch.zeros(3, dtype=dtype).to("tpu")


def test_missing_plugin():
    r = run_python("""
        import torch, torch_tpu
        print("AVAILABLE", torch.tpu.is_available(), torch.tpu.device_count())
        try:
            torch.ones(2, device="tpu")
        except RuntimeError as e:
            print("ERROR", str(e).replace("\\n", " "))
        print("ALIVE", torch.ones(2).sum().item())
    """, env={"TORCH_TPU_PLATFORM": "/nonexistent.so"})
    assert r.returncode == 0, r.stderr
    assert "AVAILABLE False 0" in r.stdout
    err = [l for l in r.stdout.splitlines() if l.startswith("ERROR")][0]
    assert "/nonexistent.so" in err, err
    assert "TORCH_TPU_PLATFORM" in err, err
    assert "ALIVE 2.0" in r.stdout


def test_broken_plugin(tmp_path):
    bad = tmp_path / "broken_plugin.so"
    bad.write_bytes(b"this is not a shared library")
    r = run_python("""
        import torch, torch_tpu
        print("AVAILABLE", torch.tpu.is_available())
        try:
            torch.ones(2, device="tpu")
        except RuntimeError as e:
            print("ERROR", str(e).replace("\\n", " "))
    """, env={"TORCH_TPU_PLATFORM": str(bad)})
    assert r.returncode == 0, r.stderr
    assert "AVAILABLE False" in r.stdout
    err = [l for l in r.stdout.splitlines() if l.startswith("ERROR")][0]
    assert "broken_plugin.so" in err, err


def test_failed_compile():
    bad_program = "module { this is not StableHLO }"
    with pytest.raises(RuntimeError) as e:
        torch_tpu.debug.compile_program(bad_program, "my_bad_program")
    msg = str(e.value)
    assert "compiling my_bad_program failed" in msg
    # The runtime is still usable.
    assert torch.ones(2, device="tpu").sum().item() == 2.0


def test_bad_env_device_count():
    r = run_python("import torch_tpu", env={"TORCH_TPU_CPU_DEVICES": "zero"})
    assert r.returncode != 0
    assert "TORCH_TPU_CPU_DEVICES must be a positive integer" in r.stderr

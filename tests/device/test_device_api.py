"""torch.tpu module functions, generated methods, torch.accelerator."""
import torch
import torch_tpu

from conftest import assert_close_cpu


def test_availability_and_count():
    assert torch.tpu.is_available()
    assert torch_tpu.is_available()
    assert torch.tpu.device_count() >= 1
    assert torch_tpu.device_count() == torch.tpu.device_count()
    assert torch.tpu.is_initialized()


def test_current_and_set_device():
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.set_device("tpu:0")
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0


def test_synchronize():
    x = torch.ones(64, 64, device="tpu")
    y = x @ x
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    torch_tpu.synchronize()
    assert_close_cpu(y, torch.full((64, 64), 64.0))


def test_device_name_and_properties():
    name = torch.tpu.get_device_name()
    assert isinstance(name, str) and name
    assert "PJRT cpu plugin" in name  # says which platform runs (the CPU plugin here)
    assert torch.tpu.get_device_name(0) == name
    props = torch.tpu.get_device_properties(0)
    assert props.name == name
    assert props.index == 0
    assert isinstance(props.total_memory, int)
    assert "name=" in repr(props)


def test_amp_supported_dtypes():
    dtypes = torch.tpu.get_amp_supported_dtype()
    assert torch.bfloat16 in dtypes
    assert all(isinstance(d, torch.dtype) for d in dtypes)


def test_generated_methods():
    x = torch.arange(4.0)
    t = x.tpu()
    assert t.is_tpu
    assert not x.is_tpu
    assert t.device == torch.device("tpu", 0)
    assert_close_cpu(t, x)
    m = torch.nn.Linear(3, 2).tpu()
    assert m.weight.is_tpu and m.bias.is_tpu
    s = x.untyped_storage().tpu()
    assert s.device.type == "tpu"
    assert s.cpu().tolist() == x.untyped_storage().tolist()
    empty = torch.UntypedStorage(8, device="tpu")
    empty.copy_(x.untyped_storage()[:8])
    assert empty.cpu().tolist() == x.untyped_storage()[:8].tolist()


def test_accelerator_reports_tpu():
    acc = torch.accelerator.current_accelerator()
    assert acc is not None and acc.type == "tpu"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch._C._get_privateuse1_backend_name() == "tpu"


def test_device_strings():
    t = torch.zeros(2, device="tpu")
    assert t.device.type == "tpu"
    assert t.device.index == 0
    assert str(torch.zeros(1, device="tpu:0").device) == "tpu:0"

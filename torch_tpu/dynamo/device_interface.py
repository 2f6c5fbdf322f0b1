"""The device interface torch.compile needs for the `tpu` device.

Dynamo asks a device's interface for the current device, stream and event
objects, synchronisation and properties whenever a traced program touches that
device. PyTorch ships a `TpuInterface` for an unrelated TPU stack (it reports
float64 and float16 unsupported, which is wrong here); registering ours after
PyTorch's own registration replaces it.
"""
import time

import torch
from torch._dynamo import device_interface as _di


class _Event:
    """Host-clock event: PJRT work is ordered per device, so recording an event
    after a synchronize gives elapsed times the way CUDA events do."""

    def __init__(self, enable_timing=True, **_):
        self.time = 0.0

    def record(self, stream=None):
        torch.tpu.synchronize()
        self.time = time.perf_counter()

    def synchronize(self):
        torch.tpu.synchronize()

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return (other.time - self.time) * 1000.0


class _Stream:
    """One in-order stream per device (PJRT's execution order)."""

    def __init__(self, device=None, priority=0, **_):
        if device is None:
            index = torch.tpu.current_device()
        elif isinstance(device, int):
            index = device
        else:
            index = torch.device(device).index or 0
        self.device = torch.device("tpu", index)
        self.device_index = index
        self.stream_id = 0
        self.device_type = 0

    def synchronize(self):
        torch.tpu.synchronize(self.device)

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record(self)
        return event

    def query(self):
        return True


class TpuDeviceInterface(_di.DeviceInterface):
    device = torch.tpu.device
    Event = _Event
    Stream = _Stream

    class Worker:
        # Used by compile workers that must not initialise the device runtime.
        @staticmethod
        def set_device(device):
            torch.tpu.set_device(device)

        @staticmethod
        def current_device():
            return torch.tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return torch.tpu.get_device_properties(device)

    @staticmethod
    def current_device():
        return torch.tpu.current_device()

    @staticmethod
    def set_device(device):
        torch.tpu.set_device(device)

    @staticmethod
    def maybe_exchange_device(device):
        prev = torch.tpu.current_device()
        if device != prev:
            torch.tpu.set_device(device)
        return prev

    exchange_device = maybe_exchange_device

    @staticmethod
    def device_count():
        return torch.tpu.device_count()

    @staticmethod
    def is_available():
        return torch.tpu.is_available()

    @staticmethod
    def stream(stream):
        return torch.tpu.device(stream.device) if stream is not None else _NullContext()

    @staticmethod
    def current_stream():
        return _Stream()

    @staticmethod
    def set_stream(stream):
        pass

    @staticmethod
    def _set_stream_by_id(stream_id, device_index, device_type):
        pass

    @staticmethod
    def get_raw_stream(device_idx):
        return 0

    @staticmethod
    def synchronize(device=None):
        torch.tpu.synchronize(device)

    @classmethod
    def get_device_properties(cls, device=None):
        return torch.tpu.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device=None):
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation=False):
        return True

    @classmethod
    def is_dtype_supported(cls, dtype, including_emulation=False):
        return True

    @staticmethod
    def memory_allocated(device=None):
        return torch.tpu.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None):
        return False

    @classmethod
    def raise_if_triton_unavailable(cls, device=None):
        raise RuntimeError("the tpu device has no Triton backend; use backend='tpu'")


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def register():
    """Installs the interface for "tpu" and "tpu:<i>" (idempotent)."""
    _di.get_interface_for_device("cpu")  # runs PyTorch's own registrations first
    _di.register_interface_for_device("tpu", TpuDeviceInterface)
    for i in range(torch.tpu.device_count()):
        _di.register_interface_for_device(f"tpu:{i}", TpuDeviceInterface)

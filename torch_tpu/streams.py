"""torch.tpu.Stream / Event / current_stream / stream(...): torch.cuda's stream API for tpu.

The streams and events themselves live in C++ (csrc/aten/stream_event.h), behind
PyTorch's generic torch.Stream / torch.Event; this module gives them the constructors
and helpers torch.cuda users call. Every stream of a device shares the
device's one in-order PJRT queue; events and waits keep CUDA's completion semantics.
"""
import torch

from . import _C


def _device(device):
    if device is None:
        return torch.device("tpu", _C._current_device())
    if isinstance(device, int):
        return torch.device("tpu", device)
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"expected a tpu device, got {device}")
    return device if device.index is not None else torch.device("tpu", _C._current_device())


class _OnTpu(type):
    """isinstance(x, torch.tpu.Stream) is True for every tpu torch.Stream (and likewise
    for events), whoever made it (torch.Stream("tpu"), torch.accelerator...)."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "tpu"


class Stream(metaclass=_OnTpu):
    """A tpu stream: `torch.tpu.Stream(device=None, priority=0)`, as torch.cuda.Stream.

    It makes a plain torch.Stream on the tpu device: PyTorch's C++ checks for
    torch.Stream / torch.Event arguments accept the exact types only, so a subclass
    would fail in `Stream.record_event(event)` or `Event.elapsed_time(other)`."""
    _base = torch.Stream

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # Stream(stream_id=..., device_index=..., device_type=...)
            return torch.Stream(priority=priority, **kwargs)
        return torch.Stream(device=_device(device), priority=priority)


class Event(metaclass=_OnTpu):
    """A tpu event: `torch.tpu.Event(enable_timing=False, blocking=False, interprocess=False)`,
    a torch.Event on the current tpu device. `record()` / `wait()` without a stream use
    the current stream, as torch.cuda.Event does."""
    _base = torch.Event

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise ValueError("tpu events cannot be shared between processes")
        return torch.Event(_device(None), enable_timing=enable_timing, blocking=blocking)


def current_stream(device=None):
    """The thread's current stream on `device` (default: the current device)."""
    return torch.accelerator.current_stream(_device(device))


def default_stream(device=None):
    """The device's default stream (stream id 0)."""
    s = torch.accelerator.current_stream(_device(device))  # for the device-type number
    return torch.Stream(stream_id=0, device_index=s.device_index, device_type=s.device_type)


def set_stream(stream):
    """Makes `stream` the thread's current stream on its device."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current (on its device) for the block; None does nothing."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = torch.accelerator.current_stream(self.stream.device)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is not None:
            torch.accelerator.set_stream(self.prev)
        return False


def stream(stream):
    """`with torch.tpu.stream(s):` runs the block with `s` as the current stream."""
    return StreamContext(stream)

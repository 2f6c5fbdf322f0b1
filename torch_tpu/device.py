"""torch.tpu: the parts of torch.cuda that users call, for the tpu device."""
import warnings

import torch

from . import _C, settings
from .streams import (  # noqa: F401  (torch.cuda's stream API)
    Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream)

_initialized_seed = None


def _index(device=None):
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        return _C._current_device() if device.index is None else device.index
    raise TypeError(f"expected a tpu device, index or string, got {type(device).__name__}")


def _checked(device=None):
    i = _index(device)
    _C._check_device(i)
    return i


def is_available():
    """True when the PJRT plugin loads and has at least one device."""
    try:
        return _C._device_count() > 0
    except RuntimeError:
        return False


def device_count():
    try:
        return _C._device_count()
    except RuntimeError:
        return 0


def is_initialized():
    return _C._initialized()


def init():
    _C._init()


def current_device():
    return _C._current_device()


def set_device(device):
    _C._set_device(_index(device))


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.idx = _index(device)
        self.prev = None

    def __enter__(self):
        self.prev = _C._current_device()
        _C._set_device(self.idx)

    def __exit__(self, *exc):
        _C._set_device(self.prev)
        return False


def synchronize(device=None):
    """Waits for all work launched on the device (all devices when None)."""
    _C._synchronize(-1 if device is None else _checked(device))


def get_device_name(device=None):
    """The device kind and the PJRT platform that runs it, e.g. 'cpu (PJRT cpu plugin)'."""
    i = _checked(device)
    return f"{_C._device_kind(i)} (PJRT {_C._platform_name()} plugin)"


class _DeviceProperties:
    def __init__(self, i):
        self.name = get_device_name(i)
        self.platform = _C._platform_name()
        self.platform_version = _C._platform_version()
        self.kind = _C._device_kind(i)
        self.index = i
        self.total_memory = mem_get_info(i)[1]

    def __repr__(self):
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"index={self.index})")


def get_device_properties(device=None):
    return _DeviceProperties(_checked(device))


def get_device_capability(device=None):
    _checked(device)
    return (0, 0)


# ---- random ------------------------------------------------------------------

def _generator(i):
    return _C._default_generator(i)


def manual_seed(seed):
    _generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed):
    for i in range(max(device_count(), 1)):
        _generator(i).manual_seed(int(seed))


def seed():
    _generator(current_device()).seed()


def seed_all():
    for i in range(device_count()):
        _generator(i).seed()


def initial_seed():
    return _generator(current_device()).initial_seed()


def get_rng_state(device="tpu"):
    """uint8 tensor of 16 bytes: the Philox seed (u64) then offset (u64)."""
    return _generator(_index(device)).get_state()


def set_rng_state(new_state, device="tpu"):
    _generator(_index(device)).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states):
    for i, s in enumerate(states):
        set_rng_state(s, i)


default_generators = ()  # filled lazily by torch where needed


# ---- memory ---------------------------------------------------------------------
# The tpu allocator is a c10::DeviceAllocator over our own accounting (PJRT CPU has
# no memory statistics): torch.accelerator's memory functions and these agree.
# A storage counts its bytes while it holds a device buffer (torch.empty allocates
# lazily); nothing is cached, so reserved == allocated.

def memory_stats(device=None):
    """torch.cuda.memory_stats' dict ("allocated_bytes.all.current", ...)."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device=None):
    return _C._memory_allocated(_index(device))


def max_memory_allocated(device=None):
    return _C._max_memory_allocated(_index(device))


def memory_reserved(device=None):
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device=None):
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None):
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device=None):
    """(free, total) bytes of the device, as torch.cuda.mem_get_info. total is what the
    PJRT plugin reports as the device's limit (TPU, GPU); the CPU plugin reports none,
    and its buffers live in host memory, so there it is the machine's physical RAM."""
    return torch.accelerator.get_memory_info(_checked(device))


def set_per_process_memory_fraction(fraction, device=None):
    """Caps this process's tpu memory at `fraction` of the device's capacity (as
    torch.cuda.set_per_process_memory_fraction), on every platform: allocations past it
    raise torch.OutOfMemoryError, and mem_get_info reports the capped total."""
    if not isinstance(fraction, (int, float)):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _C._set_memory_fraction(float(fraction), _checked(device))


def set_memory_limit(nbytes):
    """A byte limit for every tpu device of this process (0: none), the same as
    TORCH_TPU_MEMORY_LIMIT: lets a CPU host emulate a chip's memory size."""
    _C._set_memory_limit(int(nbytes))


def _init_memory_limit_from_env():
    text = settings.raw("TORCH_TPU_MEMORY_LIMIT")
    if not text:
        return
    from torch_tpu.cache import _parse_bytes
    try:
        _C._set_memory_limit(_parse_bytes(text))
    except ValueError:
        warnings.warn(f"torch_tpu: TORCH_TPU_MEMORY_LIMIT={text!r} is not a size (e.g. 16GiB); "
                      "no memory limit is set")


def empty_cache():
    """Buffers are returned to PJRT as soon as their storages die. On the CPU plugin,
    whose device memory is this process's heap, freed memory is kept in the heap for
    reuse (TORCH_TPU_CPU_KEEP_FREED_MEMORY); this gives it back to the system."""
    torch.accelerator.empty_cache()


# ---- autocast and precision ------------------------------------------------------

def get_amp_supported_dtype():
    """The dtypes torch.autocast("tpu", dtype=...) accepts: bfloat16 (the default) and float16."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    """bfloat16 is the TPU's native matmul type; every lowering handles it."""
    return True


# torch.get_float32_matmul_precision() -> the XLA precision config float32 dots get.
_XLA_PRECISION = {"highest": "HIGHEST", "high": "HIGH", "medium": "DEFAULT"}


def matmul_precision():
    """The XLA precision float32 matmuls and convolutions run with now.

    Follows torch.set_float32_matmul_precision: "highest" (PyTorch's default) ->
    "HIGHEST" (6-pass bf16 on TPU, float32 accuracy, matching the CPU), "high" ->
    "HIGH" (3-pass bf16), "medium" -> "DEFAULT" (1 bf16 pass). The CPU plugin
    computes float32 dots in float32 whatever the setting.
    """
    return _XLA_PRECISION[torch.get_float32_matmul_precision()]


def _is_in_bad_fork():
    return False

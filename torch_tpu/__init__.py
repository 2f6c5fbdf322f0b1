"""torch_tpu: a native PyTorch backend for TPU-class accelerators through XLA/PJRT.

    import torch, torch_tpu
    x = torch.ones(3, device="tpu")

Importing torch alone also registers the device (the `torch.backends` entry point).
"""
import os as _os

import torch

torch.utils.rename_privateuse1_backend("tpu")

from . import _C  # noqa: E402  (needs the backend renamed first)
from . import _platform  # noqa: E402

_platform_name, _plugin = _platform.select()
# A path starting with "!" is an explanation: the runtime raises it on first use.
_C._configure(_platform_name, _plugin, _platform.cpu_device_count())
_C._register()

from . import device as _device_module  # noqa: E402

torch._register_device_module("tpu", _device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True)


def _env_flag(*names):
    return any(_os.environ.get(n, "0").strip().lower() in ("1", "true", "yes") for n in names)


_C._set_launch_blocking(_env_flag("TORCH_TPU_LAUNCH_BLOCKING", "TPU_LAUNCH_BLOCKING"))

from . import debug  # noqa: E402
from .device import (  # noqa: E402,F401
    device_count, is_available, synchronize, manual_seed, manual_seed_all)

__all__ = ["debug", "device_count", "is_available", "synchronize", "manual_seed",
           "manual_seed_all"]

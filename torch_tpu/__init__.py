"""torch_tpu: a native PyTorch backend for TPU-class accelerators through XLA/PJRT.

    import torch, torch_tpu
    x = torch.ones(3, device="tpu")

Importing torch alone also registers the device (the `torch.backends` entry point).
"""
import atexit as _atexit
import sys as _sys

import torch

from . import settings  # noqa: E402  (the standard library only)

# A malformed TORCH_TPU_* variable fails here, naming it (docs/settings.md).
settings.check()

from . import _compat  # noqa: E402

_compat.check_supported(torch.__version__)  # before anything touches the extension

torch.utils.rename_privateuse1_backend("tpu")

# The extension built for the installed torch release (needs the backend renamed first).
_C = _compat.load_extension(torch.__version__)
from . import _platform  # noqa: E402

_platform_name, _plugin = _platform.select()
# A path starting with "!" is an explanation: the runtime raises it on first use.
_C._configure(_platform_name, _plugin, _platform.cpu_device_count(), _platform.plugin_logs(),
              _platform.keep_cpu_heap())
_C._register()
# Registered first so it runs last: no background compile may run or be destroyed
# while the process tears down (csrc/engine/compile_pool.h).
_atexit.register(_C._close_background_compiles)

from .integrations import accelerate as _accelerate_integration  # noqa: E402

# Accelerate (hence Transformers' Trainer) places models on tpu; see the module.
_accelerate_integration.install(platform_usable=not _plugin.startswith("!"))

from . import device as _device_module  # noqa: E402

if hasattr(torch, "tpu"):
    # An earlier import that failed half-way registered an older module object.
    torch.tpu = _device_module
    _sys.modules["torch.tpu"] = _device_module
else:
    torch._register_device_module("tpu", _device_module)
from . import amp as _amp  # noqa: E402

_device_module.amp = _amp
_sys.modules["torch.tpu.amp"] = _amp
from . import _multiprocessing  # noqa: E402
_multiprocessing._install()
from . import distributed  # noqa: E402  (the `tpu` / `tpu_dist` process-group backend)

distributed._register()
from .dynamo import inductor_hook as _inductor_hook  # noqa: E402

# torch.compile's default backend (inductor) hands tpu graphs to our compiler; see the module.
_inductor_hook.install()
# The tpu kernels of the flex_attention higher-order ops (flex_attention itself also
# needs torch_tpu.integrations.flex_attention.enable(); see docs/flex_attention.md).
from . import _flex_attention_hop  # noqa: E402,F401

if not hasattr(torch.Tensor, "is_tpu"):
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True)


_C._set_launch_blocking(settings.get("TORCH_TPU_LAUNCH_BLOCKING"))

from . import cache  # noqa: E402

# Before anything compiles: where compiled programs persist, and where to dump them.
cache._configure_from_env()
_C._set_dump_dir(settings.get("TORCH_TPU_DUMP_DIR") or "")

from . import debug  # noqa: E402
from . import numerics as _numerics  # noqa: E402

_numerics._init_from_env()
_device_module._init_memory_limit_from_env()
from . import modes as _modes  # noqa: E402
from .modes import (  # noqa: E402,F401
    execution_mode, get_execution_mode, mark_step, set_execution_mode)

_modes._init_from_env()
from .device import (  # noqa: E402,F401
    device_count, is_available, synchronize, manual_seed, manual_seed_all)
from .dynamo.buckets import set_dynamic_buckets  # noqa: E402,F401  (imports no Dynamo)


def _deferred_bucket_hook(desc):
    # Defer & Fuse's fused-cache misses (torch_tpu/dynamo/deferred_buckets.py),
    # imported at the first miss: a process that never misses imports nothing.
    from .dynamo import deferred_buckets
    return deferred_buckets.hook(desc)


_C._set_deferred_bucket_hook(_deferred_bucket_hook)

__all__ = ["cache", "debug", "device_count", "is_available", "synchronize", "manual_seed",
           "manual_seed_all", "set_execution_mode", "get_execution_mode", "execution_mode",
           "mark_step", "set_dynamic_buckets"]

"""torch.tpu.amp: the names torch.cuda.amp offers, for the tpu device.

TPUs compute in bfloat16, so autocast here defaults to torch.bfloat16 (as
`torch.autocast("tpu")` does); float16 works too and then wants a GradScaler,
as on CUDA. Both are thin spellings of torch.amp's device-generic classes:

    with torch.tpu.amp.autocast():            # == torch.autocast("tpu", torch.bfloat16)
        loss = model(x)
    scaler = torch.tpu.amp.GradScaler()       # == torch.amp.GradScaler("tpu")
"""
import functools

import torch


class autocast(torch.amp.autocast):
    """torch.autocast("tpu", ...) with torch.cuda.amp.autocast's argument order."""

    def __init__(self, enabled=True, dtype=torch.bfloat16, cache_enabled=True):
        super().__init__("tpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("tpu", ...) with torch.cuda.amp.GradScaler's arguments."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


# Decorators for custom autograd Functions (backward runs under the forward's autocast state).
custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="tpu")
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="tpu")

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]

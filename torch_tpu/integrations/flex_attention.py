"""Lets `torch.nn.attention.flex_attention.flex_attention` accept tpu tensors: an opt-in.

PyTorch 2.13's `flex_attention` checks its inputs' device against a fixed set
(`_validate_device`: cuda, cpu, xpu, hpu, mps) before any kernel is reached, also while
Dynamo traces it, and raises `ValueError` for every other device. There is no hook to
extend that set. The flex_attention higher-order op itself runs on tpu (its tpu
kernels are torch_tpu/_flex_attention_hop.py, registered when torch_tpu loads), so
libraries that call `flex_attention` (TorchTitan's default attention, Transformers'
`attn_implementation="flex_attention"`) work once the check lets tpu through:

    import torch_tpu.integrations.flex_attention as tpu_flex
    tpu_flex.enable()        # before the first flex_attention call (or torch.compile trace)

`enable()` replaces that one function of `torch.nn.attention.flex_attention` with one
that returns at once for tpu inputs and hands every other device to PyTorch's original
(so cpu/cuda behave exactly as before, including the CPU's refusal of backward).
Where Transformers is installed, it also lets Transformers' own refusal of flex attention
on a tpu host through (`_transformers_flex.py`: which names, why, and the upstream change).
Nothing else is changed, and nothing happens at import: this is the project's one kind
of allowed patch, an explicit call where an upstream check refuses our device and no
hook exists. `disable()` puts the original back.

The upstream change that removes it: `_validate_device` accepting the PrivateUse1
backend when that backend registers kernels for the flex_attention HOP (for example by
asking `torch.ops.higher_order.flex_attention` whether it has a kernel for the inputs'
dispatch key, or a device registry that backends add themselves to), instead of a fixed
device list.
"""
import torch

from torch_tpu.integrations import _transformers_flex

_original_validate_device = None


def _tpu_type():
    return torch._C._get_privateuse1_backend_name()


def enable():
    """Makes `flex_attention` accept tpu tensors (idempotent). See the module note."""
    global _original_validate_device
    import torch.nn.attention.flex_attention as flex

    if _original_validate_device is not None:
        return
    original = flex._validate_device
    tpu = _tpu_type()  # read once: Dynamo traces the check below, a str compare

    def _validate_device(query, key, value):
        if query.device.type == tpu:
            return None  # the HOP's tpu kernels run forward and backward
        return original(query, key, value)

    _validate_device.__doc__ = (
        "torch_tpu.integrations.flex_attention.enable(): tpu inputs pass, "
        "every other device goes to PyTorch's check.")
    _original_validate_device = original
    flex._validate_device = _validate_device
    _transformers_flex.enable()


def disable():
    """Restores PyTorch's own device check (idempotent)."""
    global _original_validate_device
    import torch.nn.attention.flex_attention as flex

    if _original_validate_device is None:
        return
    flex._validate_device = _original_validate_device
    _original_validate_device = None
    _transformers_flex.disable()


def is_enabled():
    return _original_validate_device is not None

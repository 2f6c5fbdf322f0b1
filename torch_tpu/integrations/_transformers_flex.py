"""The Transformers half of torch_tpu.integrations.flex_attention.enable().

Transformers (5.x) decides once whether flex attention exists,
`utils.import_utils.is_torch_flex_attn_available()`, and answers False whenever the
host's accelerator is `tpu` ("torch's flex_attention refuses TPU tensors"). Three of its
modules act on that answer: `modeling_utils` refuses `attn_implementation=
"flex_attention"`, and `masking_utils` and `integrations.flex_attention` skip importing
`BlockMask`, `create_block_mask` and `flex_attention` at import time. There is no hook
to change the answer, so the opt-in rebinds exactly those names, in those modules, to
what they hold where the check says True, and `disable()` puts every one back.

Only called from `enable()`; a no-op where Transformers is not installed or does not
have the check (older or newer releases that do not refuse tpu).

The upstream change that removes it: that check asking torch whether flex_attention
supports the device (with PyTorch's change named in flex_attention.py, whether the op
has a kernel for its dispatch key) instead of refusing the tpu accelerator by name.
"""
import importlib

# (module, name) -> the value before enable(); _MISSING where the module had no such name.
_saved = {}
_MISSING = object()


def _available():
    return True


def _targets():
    import torch.nn.attention.flex_attention as flex

    values = {
        "is_torch_flex_attn_available": _available,
        "BlockMask": flex.BlockMask,
        "create_block_mask": flex.create_block_mask,
        "flex_attention": flex.flex_attention,
        "flex_default_block_size": flex._DEFAULT_SPARSE_BLOCK_SIZE,
        "AuxRequest": getattr(flex, "AuxRequest", None),
    }
    # Which names each module binds where the check passes (see the module note).
    return {
        "transformers.utils.import_utils": ("is_torch_flex_attn_available",),
        "transformers.utils": ("is_torch_flex_attn_available",),
        "transformers.modeling_utils": ("is_torch_flex_attn_available",),
        "transformers.masking_utils": (
            "is_torch_flex_attn_available", "BlockMask", "create_block_mask"),
        "transformers.integrations.flex_attention": (
            "is_torch_flex_attn_available", "BlockMask", "create_block_mask",
            "flex_attention", "flex_default_block_size", "AuxRequest"),
    }, values


def enable():
    if _saved:
        return
    try:
        import_utils = importlib.import_module("transformers.utils.import_utils")
    except ImportError:
        return  # Transformers not installed: nothing refuses tpu
    check = getattr(import_utils, "is_torch_flex_attn_available", None)
    if check is None or check():
        return  # this release has no check, or it already lets flex through
    modules, values = _targets()
    for module_name, names in modules.items():
        module = importlib.import_module(module_name)
        for name in names:
            _saved[(module_name, name)] = getattr(module, name, _MISSING)
            setattr(module, name, values[name])


def disable():
    for (module_name, name), value in _saved.items():
        module = importlib.import_module(module_name)
        if value is _MISSING:
            delattr(module, name)
        else:
            setattr(module, name, value)
    _saved.clear()

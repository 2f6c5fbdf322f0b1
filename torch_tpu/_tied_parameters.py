"""Keeps tied parameters tied when a module moves to or from the tpu device.

`Module.to()` keeps a Parameter shared by several modules (tied embeddings) only
when it can swap `.data` in place, which PyTorch allows for CPU/CUDA-style
dense tensors but not for a PrivateUse1 device such as tpu: there `_apply`
makes one new Parameter per module and the tie silently breaks (the model then
trains as an untied one). We wrap `Module._apply` to re-tie, after the move,
every group of parameters that was one object before it.
"""
import functools

import torch


def _install():
    original = torch.nn.Module._apply
    if getattr(original, "_torch_tpu_reties", False):
        return

    @functools.wraps(original)
    def _apply(self, fn, *args, **kwargs):
        groups = {}
        for module in self.modules():
            for name, p in module._parameters.items():
                if p is not None:
                    groups.setdefault(id(p), []).append((module, name))
        result = original(self, fn, *args, **kwargs)
        for refs in groups.values():
            if len(refs) < 2:
                continue
            first_module, first_name = refs[0]
            shared = first_module._parameters[first_name]
            for module, name in refs[1:]:
                if module._parameters[name] is not shared:
                    module._parameters[name] = shared
        return result

    _apply._torch_tpu_reties = True
    torch.nn.Module._apply = _apply

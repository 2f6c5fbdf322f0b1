"""Sending tpu tensors to other processes (torch.multiprocessing queues, pipes,
process arguments).

PJRT gives no way to share a device buffer between processes (CUDA has IPC
handles; PJRT clients are per process). A tpu tensor therefore crosses by value:
its pending Defer & Fuse value is materialised first (the sending process's
graph runs), its bytes travel inside the pickle, and the receiver rebuilds the
tensor on the same tpu device index. The bytes go by value rather than through
PyTorch's CPU shared-memory path, whose file descriptors are served by the
sending process: a sender that exits right after sending would leave the
receiver nothing to read. Writes made by one process are not seen by the other,
so the first send warns once.
"""
import multiprocessing.reduction
import warnings

import torch
from torch.multiprocessing import reductions

_warned = False


def _rebuild_tpu_tensor(data, dtype, shape, device_index, requires_grad, is_parameter):
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    t = flat.view(dtype).reshape(shape).to(torch.device("tpu", device_index))
    if is_parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def _install():
    reduce_tensor = reductions.reduce_tensor

    def reduce_maybe_tpu(tensor):
        if tensor.device.type != "tpu":
            return reduce_tensor(tensor)
        if tensor.requires_grad and not tensor.is_leaf:
            return reduce_tensor(tensor)  # PyTorch's own clear refusal
        global _warned
        if not _warned:
            _warned = True
            warnings.warn("torch_tpu: tpu tensors are sent to other processes by value (PJRT "
                          "cannot share device memory between processes); writes in one "
                          "process are not seen by the other.", stacklevel=2)
        cpu = tensor.detach().cpu().contiguous()  # materialises a pending value first
        data = cpu.reshape(-1).view(torch.uint8).numpy().tobytes()
        return (_rebuild_tpu_tensor,
                (data, cpu.dtype, tuple(cpu.shape), tensor.device.index or 0,
                 tensor.requires_grad, isinstance(tensor, torch.nn.Parameter)))

    for cls in (torch.Tensor, torch.nn.Parameter):
        multiprocessing.reduction.register(cls, reduce_maybe_tpu)

"""torch.distributed on tpu: the `tpu` process-group backend (alias `tpu_dist`).

Registered when torch_tpu loads (so `import torch` alone is enough), for the
device type "tpu", so that all of these work under torchrun:

    dist.init_process_group()                     # the accelerator's backend: tpu
    dist.init_process_group("tpu")                # or "tpu_dist", or "cpu:gloo,tpu:tpu"
    init_device_mesh("tpu", (2,))

The backend is a C++ c10d.Backend (torch_tpu._C._distributed.TpuBackend). Its
transport today is host staging: pending Defer & Fuse work is flushed, tensors
are copied to the host, PyTorch's Gloo runs the collective on a process group
built on the same store, and the results are copied back into the tpu tensors.
The same Gloo serves the group's CPU tensors.

Each process uses one tpu device: its LOCAL_RANK where the client has several
devices per host, device 0 of its own client on the CPU plugin (a process
owns its CPU client). torch.tpu.set_device(i) before init_process_group wins.
"""
import os

import torch

BACKEND_NAME = "tpu"
ALIASES = ("tpu_dist",)


def _bind_device():
    """Chooses this process's tpu device the first time a tpu group is made."""
    from .. import _C
    if _C._initialized() and _C._current_device() != 0:
        return  # the user chose one already
    n = _C._device_count()
    local_rank = os.environ.get("LOCAL_RANK")
    if _C._platform() == "cpu" or local_rank is None or n <= 1:
        index = 0
    else:
        index = int(local_rank)
        if index >= n:
            raise RuntimeError(
                f"LOCAL_RANK={index} but this host has {n} tpu device(s): start at most {n} "
                f"processes per host, or choose a device with torch.tpu.set_device() first")
    _C._set_device(index)


def _create_backend(opts, backend_options):
    """The creator torch.distributed calls for a tpu process group (extended API:
    `opts` is a c10d _DistributedBackendOptions)."""
    from torch.distributed import PrefixStore, ProcessGroupGloo
    from .. import _C
    _bind_device()
    timeout = opts.timeout
    # The host transport: Gloo on its own prefix of the group's store, so a
    # "cpu:gloo,tpu:tpu" group's two Gloo instances never share keys, and one
    # per generation: torchrun's store outlives destroy_process_group(), and a
    # re-created group of the same name must not read its predecessor's
    # addresses. Every member adds one; a group's creation cannot finish on
    # any rank before all members have added (Gloo connects them all).
    generation = (opts.store.add("tpu_host_staged_generation", 1) - 1) // opts.group_size
    store = PrefixStore(f"host_staged/{generation}/", opts.store)
    gloo = ProcessGroupGloo(store, opts.group_rank, opts.group_size, timeout)
    gloo.options.global_ranks_in_group = list(opts.global_ranks_in_group)
    gloo.options.group_name = opts.group_id
    gloo._set_sequence_number_for_group()
    backend = _C._distributed.TpuBackend(gloo, opts.group_rank, opts.group_size, timeout)
    return _group_with_default(opts, backend, gloo)


def _group_with_default(opts, backend, gloo):
    """The whole ProcessGroup for a tpu group, with our backend as its default.

    Why not return just the backend: PyTorch 2.13's `_new_process_group_helper`
    picks a group's *default* backend type without looking at which backends it
    registers. For `init_process_group()` (backend "undefined", which also
    `init_device_mesh("tpu", ...)` uses) it is hard-coded to NCCL if the config
    names nccl, else GLOO, while our backend is registered under the type
    CUSTOM. The group then has no backend of its default type, so everything
    that asks for the default backend (DDP's logger in
    `set_construction_data_and_log`, sequence numbers, `pg._get_backend_name()`)
    raises "Could not find backend type 1 for Process Group with name gloo";
    collectives still work because they pick the backend by tensor device.
    A creator may instead return a complete ProcessGroup, which PyTorch then
    uses as the group (its extension path for Python process groups), so the
    default is ours whatever the spelling. It also serves CPU tensors through
    the same Gloo transport, so "cpu:gloo,tpu:tpu" keeps working unchanged (the
    Gloo PyTorch built for "cpu" before calling us is dropped) and plain
    `init_process_group()` handles CPU tensors as a "cpu:gloo" group would.
    The upstream change that makes this unnecessary: choosing the default type
    among the backends the group registers (pytorch/pytorch#189193, for XPU's
    same failure); with it, returning the backend alone works again.
    What PyTorch sets on the group it built before calling us is not carried
    over: `init_process_group(device_id=...)` leaves `bound_device_id` None (no
    eager connect; our backend does not split anyway), and
    TORCH_DISTRIBUTED_DEBUG=DETAIL does not wrap the group.
    """
    from torch.distributed import ProcessGroup
    pg = ProcessGroup(opts.store, opts.group_rank, opts.group_size)
    pg._register_backend(torch.device("tpu"), ProcessGroup.BackendType.CUSTOM, backend)
    pg._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, gloo)
    pg._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    return pg


def is_registered():
    import torch.distributed as dist
    return dist.is_available() and BACKEND_NAME.upper() in dist.Backend._plugins


def _register():
    import torch.distributed as dist
    if not dist.is_available() or is_registered():
        return
    # devices is a list: PyTorch 2.13 iterates a string character by character.
    for name in (BACKEND_NAME,) + ALIASES:
        dist.Backend.register_backend(name, _create_backend, extended_api=True, devices=["tpu"])


__all__ = ["BACKEND_NAME", "ALIASES", "is_registered"]

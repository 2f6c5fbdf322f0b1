"""Whether a tpu collective's work keeps the Python objects stashed in the poster's
thread-local state (torch._C._stash_obj_in_tls, which torch.autograd does with the
caller's contextvars context for every backward).

The work (Gloo's, and the completion callback on its future) copies the poster's
at::ThreadLocalState and is freed on Gloo's worker thread; a Python object in it
makes that thread take the GIL, which deadlocks when the group is destroyed under
the GIL (its destructor joins the thread: DDP's Reducer freed by Python), and aborts
during interpreter exit. For each collective: posts it with a probe object stashed,
removes the probe from the thread, and reports how many references to the probe
remain while the work handle (and so the work) is alive:
`rank <r>: a pending <collective> holds <n> reference(s)`. Each collective runs once
before, so that no program of it is still compiling in the background (a compile
job carries the poster's state too, on threads of ours that are never joined under
the GIL).
"""
import sys

import torch
import torch.distributed as dist

dist.init_process_group("tpu")
rank, world = dist.get_rank(), dist.get_world_size()


def post(kind):
    x = torch.ones(4 * world, device="tpu")
    if kind == "all_reduce":
        return dist.all_reduce(x, async_op=True)
    if kind == "broadcast":
        return dist.broadcast(x, src=0, async_op=True)
    if kind == "all_gather_into_tensor":
        return dist.all_gather_into_tensor(torch.empty(4 * world * world, device="tpu"), x,
                                           async_op=True)
    return dist.reduce_scatter_tensor(torch.empty(4, device="tpu"), x, async_op=True)


probe = object()
base = sys.getrefcount(probe)
for kind in ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor"):
    post(kind).wait()
    torch.tpu.synchronize()
    torch._C._stash_obj_in_tls("torch_tpu_probe", probe)
    work = post(kind)
    torch._C._remove_obj_from_tls("torch_tpu_probe")
    held = sys.getrefcount(probe) - base
    work.wait()
    del work
    print(f"rank {rank}: a pending {kind} holds {held} reference(s)", flush=True)
dist.destroy_process_group()

"""DistributedDataParallel on a tpu model for each way of creating the default
process group named on the command line: "default" (`init_process_group()`),
"tpu", "tpu_dist", "cpu:gloo,tpu:tpu" or "mesh" (`init_device_mesh("tpu", ...)`),
one after the other (the group is destroyed between them).

For each, every rank trains a small MLP for 3 SGD steps on its own shard of a
global batch; the parameters must equal one CPU process trained on the whole
batch (DDP averages the gradients, so both take the same steps). A CPU tensor
all_reduce on the same group must work too. Prints `rank <r>: DDP <spelling> OK`.
"""
import copy
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 3
TIMEOUT = datetime.timedelta(seconds=300)


def init(spelling):
    if spelling == "default":
        dist.init_process_group(timeout=TIMEOUT)
    elif spelling == "mesh":
        init_device_mesh("tpu", (int(os.environ["WORLD_SIZE"]),))
    else:
        dist.init_process_group(spelling, timeout=TIMEOUT)


def batches(world):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4 * world, 8, generator=g), torch.randn(4 * world, 2, generator=g))
            for _ in range(STEPS)]


def train(spelling):
    init(spelling)
    rank, world = dist.get_rank(), dist.get_world_size()
    # CPU tensors work on the same group (PyTorch's Gloo serves them).
    c = torch.full((2,), float(rank + 1))
    dist.all_reduce(c)
    assert c.tolist() == [float(world * (world + 1) // 2)] * 2, (spelling, c)
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    model = DDP(copy.deepcopy(reference).to("tpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in batches(world):
        shard = slice(4 * rank, 4 * (rank + 1))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[shard].to("tpu")), y[shard].to("tpu")).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
    for (name, p), ref in zip(model.module.named_parameters(), reference.parameters()):
        assert p.device.type == "tpu", name
        torch.testing.assert_close(p.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{spelling} {name}: {m}")
    dist.destroy_process_group()
    print(f"rank {rank}: DDP {spelling} OK", flush=True)


if __name__ == "__main__":
    for spelling in sys.argv[1:]:
        train(spelling)

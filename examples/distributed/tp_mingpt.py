"""minGPT trained with tensor parallelism (DTensor) on tpu: each block's linear
layers split across the ranks (ColwiseParallel / RowwiseParallel, attention
heads split), the LayerNorms sequence-parallel (the residual stream is sharded
along the sequence between blocks). The embeddings and the tied output head
stay replicated.

    torchrun --nproc_per_node 2 examples/distributed/tp_mingpt.py --check

Every rank sees the whole global batch (no data parallelism). --check: the
parameters after --check-steps AdamW steps, gathered, equal those of one CPU
process trained on the same batches.
"""
import math
import time

from common import (Batches, build_model, compare_params, data, optimizer, parser,  # noqa: I100
                    reference_params, setup)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: E402
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,  # noqa: E402
                                               RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from examples.mingpt.model import CausalSelfAttention  # noqa: E402


class LocalHeadsAttention(CausalSelfAttention):
    """minGPT's attention over the heads this rank holds: sizes come from the
    (column-sharded) qkv output, not from the full embedding width."""

    def forward(self, x):
        b, t, _ = x.shape
        qkv = self.qkv(x)
        c = qkv.size(-1) // 3
        hd = self.head_dim
        q, k, v = (z.view(b, t, c // hd, hd).transpose(1, 2) for z in qkv.split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.drop(self.proj(y))


def qkv_order(width, heads, tp):
    """Row order of the fused qkv weight that puts each rank's heads' q, k and v
    in its column shard: [q, k, v of heads 0..h/tp) | [q, k, v of the next] ..."""
    hd = width // heads
    per = heads // tp
    rows = []
    for r in range(tp):
        for part in range(3):
            start = part * width + r * per * hd
            rows.extend(range(start, start + per * hd))
    return torch.tensor(rows)


def tensor_parallel(model, mesh, args):
    order = qkv_order(args.width, args.heads, mesh.size())
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.__class__ = LocalHeadsAttention
            blk.attn.head_dim = args.width // args.heads
            blk.attn.qkv.weight.copy_(blk.attn.qkv.weight[order])
            blk.attn.qkv.bias.copy_(blk.attn.qkv.bias[order])
    for i, blk in enumerate(model.blocks):
        parallelize_module(blk, mesh, {
            "ln1": SequenceParallel(),
            "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "attn.qkv": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
            "ln2": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.0": ColwiseParallel(),
            "mlp.2": RowwiseParallel(output_layouts=Shard(1)),
        })
    # The replicated embeddings' output enters the first block sequence-sharded;
    # the last norm's output leaves for the replicated head whole.
    parallelize_module(model, mesh, {
        "blocks.0": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                       use_local_output=True),
        "ln_f": SequenceParallel(),
        "head": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                   use_local_output=True),
    })
    return order


def gathered_params(model, order):
    """Full parameters by name, the qkv rows put back in minGPT's order."""
    out = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if isinstance(p, DTensor) else p
        full = full.detach().cpu()
        if name.endswith("attn.qkv.weight") or name.endswith("attn.qkv.bias"):
            restored = torch.empty_like(full)
            restored[order] = full
            full = restored
        out[name] = full
    return out


def main():
    args = parser(__doc__).parse_args()
    rank, world, device = setup(args)
    assert args.heads % world == 0, "--heads must be a multiple of the world size"
    assert args.context % world == 0, "--context must be a multiple of the world size"
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("tp",))
    chars = data()
    model = build_model(args, chars, device)
    order = tensor_parallel(model, mesh, args)
    # Per-tensor AdamW: the sharded parameters are DTensors, the replicated
    # embeddings plain tensors, and one foreach call cannot mix the two.
    opt = optimizer(args, model.parameters(), foreach=False)
    batches = Batches(args, chars)
    steps = args.check_steps if args.check else args.steps
    start = time.perf_counter()
    for step in range(steps):
        x, y = (t.to(device) for t in batches.next())
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    per_step = (time.perf_counter() - start) / steps
    if rank == 0:
        print(f"{world} process(es): {per_step * 1e3:.1f} ms/step", flush=True)
    if args.check:
        compare_params(gathered_params(model, order), reference_params(args, chars), args.lr,
                       args.check_steps)
        print(f"rank {rank}: check OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

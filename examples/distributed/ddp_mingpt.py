"""minGPT trained with DistributedDataParallel on tpu (one process per device).

    torchrun --nproc_per_node 2 examples/distributed/ddp_mingpt.py
    torchrun --nproc_per_node 2 examples/distributed/ddp_mingpt.py --check --accum 2 --comm-hook allreduce

The global batch (--batch) is split across the ranks; --accum accumulates that
many micro-batches per step, all but the last under DDP's no_sync(); a comm
hook replaces DDP's own allreduce. --check: the parameters after --check-steps
AdamW steps equal those of one CPU process trained on the same global batches.
"""
import time

from common import (Batches, build_model, compare_params, data, optimizer, parser,  # noqa: I100
                    reference_params, setup, shard)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main():
    p = parser(__doc__)
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--warmup", type=int, default=0, help="steps left out of the step time")
    p.add_argument("--comm-hook", choices=["none", "allreduce"], default="none",
                   help="allreduce: torch's default_hooks.allreduce_hook (Python, on futures)")
    args = p.parse_args()
    rank, world, device = setup(args)
    assert args.batch % world == 0, "--batch must be a multiple of the world size"
    chars = data()
    model = DDP(build_model(args, chars, device))
    if args.comm_hook == "allreduce":
        model.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    opt = optimizer(args, model.parameters())
    batches = Batches(args, chars)
    steps = args.check_steps if args.check else args.steps
    start = time.perf_counter()
    for step in range(steps):
        if step == args.warmup and step:
            if device.type == "tpu":
                torch.tpu.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for micro in range(args.accum):
            x, y = (shard(t, rank, world).to(device) for t in batches.next())
            last = micro == args.accum - 1
            ctx = model.no_sync() if not last else torch.enable_grad()
            with ctx:
                _, loss = model(x, y)
                (loss / args.accum).backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    if device.type == "tpu":
        torch.tpu.synchronize()
    per_step = (time.perf_counter() - start) / max(steps - args.warmup, 1)
    if rank == 0:
        print(f"{world} process(es): {per_step * 1e3:.1f} ms/step", flush=True)
    if args.check:
        want = reference_params(args, chars, micro_steps=args.accum)
        got = dict(model.module.named_parameters())
        compare_params(got, want, args.lr, args.check_steps)
        # And every rank holds the same parameters.
        flat = torch.cat([q.detach().reshape(-1) for q in model.module.parameters()])
        lo, hi = flat.clone(), flat.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        assert torch.equal(lo.cpu(), hi.cpu()), "ranks disagree on the parameters"
        print(f"rank {rank}: check OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""minGPT trained with FSDP2 (fully_shard per block, then the whole model) on
tpu, built on the meta device and materialised with to_empty; optionally saved
and reloaded with torch.distributed.checkpoint (DCP) at another world size.

    torchrun --nproc_per_node 2 examples/distributed/fsdp_mingpt.py --check
    torchrun --nproc_per_node 2 examples/distributed/fsdp_mingpt.py --check --save /tmp/ckpt
    torchrun --nproc_per_node 4 examples/distributed/fsdp_mingpt.py --load /tmp/ckpt

--check: the gathered parameters after --check-steps AdamW steps equal one CPU
process trained on the same global batches. --save DIR writes the sharded model
and optimizer state after those steps; --load DIR (any world size) reads them
into a freshly sharded model and checks parameters and AdamW moments against
the same CPU run.
"""
import argparse
import time

from common import (Batches, build_model, compare_params, data, optimizer, parser,  # noqa: I100
                    setup, shard)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor, distribute_tensor  # noqa: E402


def sharded_model(args, chars, mesh, device):
    with torch.device("meta"):
        model = build_model(args, chars, "meta")
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=device)
    # The same initial weights as the CPU reference: its full tensors, sharded.
    # Buffers too: to_empty leaves them uninitialised (the causal masks).
    ref = build_model(args, chars)
    full = dict(ref.named_parameters())
    buffers = dict(ref.named_buffers())
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(distribute_tensor(full[name].to(device), mesh, p.placements))
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
    return model


def reference(args, chars):
    """(parameters, AdamW state by parameter name) of the single-process CPU run."""
    model = build_model(args, chars)
    opt = optimizer(args, model.parameters())
    batches = Batches(args, chars)
    for _ in range(args.check_steps):
        opt.zero_grad(set_to_none=True)
        x, y = batches.next()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
    names = {p: n for n, p in model.named_parameters()}
    state = {names[p]: s for p, s in opt.state.items()}
    return dict(model.named_parameters()), state


def full(t):
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def main():
    p = parser(__doc__)
    p.add_argument("--save", help="write a DCP checkpoint here after the check steps")
    p.add_argument("--load", help="read a DCP checkpoint and check it against the CPU run")
    p.add_argument("--warmup", type=int, default=0, help="steps left out of the step time")
    p.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    rank, world, device = setup(args)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    chars = data()
    model = sharded_model(args, chars, mesh, device)
    opt = optimizer(args, model.parameters())
    if args.load:
        # AdamW's state must exist before loading into it: one step with zero gradients.
        for q in model.parameters():
            q.grad = torch.zeros_like(q)
        opt.step()
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=args.load)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        want_params, want_state = reference(args, chars)
        compare_params({n: full(q) for n, q in model.named_parameters()}, want_params, args.lr,
                       args.check_steps)
        names = {q: n for n, q in model.named_parameters()}
        for q, s in opt.state.items():
            for key in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(full(s[key]), want_state[names[q]][key], rtol=1e-3,
                                           atol=1e-6, msg=lambda m: f"{names[q]} {key}: {m}")
        print(f"rank {rank}: load OK at world size {world}", flush=True)
        dist.destroy_process_group()
        return
    assert args.batch % world == 0, "--batch must be a multiple of the world size"
    batches = Batches(args, chars)
    steps = args.check_steps if (args.check or args.save) else args.steps
    start = time.perf_counter()
    for step in range(steps):
        if step == args.warmup and step:
            if device.type == "tpu":
                torch.tpu.synchronize()
            start = time.perf_counter()
        x, y = (shard(t, rank, world).to(device) for t in batches.next())
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == steps - 1 or args.debug):
            print(f"step {step}: loss {loss.item():.4f}", flush=True)
    if device.type == "tpu":
        torch.tpu.synchronize()
    timed = steps - args.warmup if 0 < args.warmup < steps else steps
    per_step = (time.perf_counter() - start) / max(timed, 1)
    if rank == 0:
        print(f"{world} process(es): {per_step * 1e3:.1f} ms/step", flush=True)
    if args.check:
        want_params, _ = reference(args, chars)
        compare_params({n: full(q) for n, q in model.named_parameters()}, want_params, args.lr,
                       args.check_steps)
        print(f"rank {rank}: check OK", flush=True)
    if args.save:
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=args.save)
        print(f"rank {rank}: saved", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

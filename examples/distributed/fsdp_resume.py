"""Fault-tolerant minGPT training with FSDP2 on tpu: a DCP checkpoint every few steps,
and a restarted run (torchrun --max-restarts) resumes from the newest one.

    torchrun --nproc_per_node 2 --max-restarts 1 examples/distributed/fsdp_resume.py \\
        --ckpt-dir /tmp/run --ckpt-every 2 --steps 8

Each checkpoint is a DCP directory `step_<N>` (model and AdamW state, sharded as trained)
written by every rank. It counts only once rank 0 has written its name to `LATEST`
after a barrier, so a rank killed while saving leaves the previous checkpoint current.
On start every rank reads `LATEST`, loads that checkpoint and skips the global batches
already trained on. The batch sequence, the weights and the optimizer state then
continue exactly as in an uninterrupted run.

--fail-at S (for the fault test): on the first attempt only, rank 1 dies at step S as if
killed (os._exit, no clean-up); torchrun then restarts every rank.
--final PATH: rank 0 writes the full parameters there at the end (torch.save).
"""
import os

from common import Batches, build_model, data, optimizer, parser, setup, shard  # noqa: I100

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402


def sharded_model(args, chars, mesh, device):
    model = build_model(args, chars, device)  # the same seeded weights on every rank
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def latest_step(ckpt_dir):
    try:
        with open(os.path.join(ckpt_dir, "LATEST")) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return 0


def save(model, opt, ckpt_dir, step, rank):
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(ckpt_dir, f"step_{step}"))
    dist.barrier()  # every rank's shards are on disk before the checkpoint counts
    if rank == 0:
        tmp = os.path.join(ckpt_dir, "LATEST.tmp")
        with open(tmp, "w") as f:
            f.write(str(step))
        os.replace(tmp, os.path.join(ckpt_dir, "LATEST"))  # atomic: never half-written
    dist.barrier()


def load(model, opt, ckpt_dir, step):
    # AdamW's state must exist before DCP can load into it: one step with zero gradients
    # and a zero learning rate creates it without moving a weight.
    lrs = [g["lr"] for g in opt.param_groups]
    for g in opt.param_groups:
        g["lr"] = 0.0
    for q in model.parameters():
        q.grad = torch.zeros_like(q)
    opt.step()
    opt.zero_grad(set_to_none=True)
    for g, lr in zip(opt.param_groups, lrs):
        g["lr"] = lr
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(ckpt_dir, f"step_{step}"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def main():
    p = parser(__doc__, steps=8)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--ckpt-every", type=int, default=2)
    p.add_argument("--fail-at", type=int, default=-1, help="rank 1 dies at this step, first attempt")
    p.add_argument("--final", help="rank 0 writes the full parameters here")
    args = p.parse_args()
    rank, world, device = setup(args)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.makedirs(args.ckpt_dir, exist_ok=True)
    mesh = init_device_mesh(device.type, (world,), mesh_dim_names=("dp",))
    chars = data()
    model = sharded_model(args, chars, mesh, device)
    opt = optimizer(args, model.parameters())
    start = latest_step(args.ckpt_dir)
    if start:
        load(model, opt, args.ckpt_dir, start)
        print(f"rank {rank}: attempt {attempt} resumed from step {start}", flush=True)
    batches = Batches(args, chars)
    for _ in range(start):
        batches.next()  # the global batches already trained on
    for step in range(start, args.steps):
        if step == args.fail_at and attempt == 0 and rank == 1:
            print(f"rank {rank}: dying at step {step}", flush=True)
            os._exit(1)
        x, y = (shard(t, rank, world).to(device) for t in batches.next())
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss {loss.item():.6f}", flush=True)
        if (step + 1) % args.ckpt_every == 0:
            save(model, opt, args.ckpt_dir, step + 1, rank)
    full = {n: (q.full_tensor() if isinstance(q, DTensor) else q).detach().cpu()
            for n, q in model.named_parameters()}
    if rank == 0 and args.final:
        torch.save(full, args.final)
    print(f"rank {rank}: done after attempt {attempt}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Trains a sharded TorchRec EmbeddingBagCollection under torchrun on tpu (our `tpu`
process-group backend) and prints one `RESULT {json}` line on rank 0.

    torchrun --nproc_per_node 2 tests/integrations/torchrec_dmp_run.py data_parallel
    torchrun --nproc_per_node 1 tests/integrations/torchrec_dmp_run.py data_parallel
    torchrun --nproc_per_node 2 tests/integrations/torchrec_dmp_run.py table_wise
    torchrun --nproc_per_node 2 tests/integrations/torchrec_dmp_run.py table_wise --optim rowwise_adagrad
    torchrun --nproc_per_node 1 tests/integrations/torchrec_dmp_run.py table_wise --cpu

`--cpu` runs the same on the CPU with Gloo (fbgemm's own CPU kernels: the reference).

Every run sees the same global batches; rank r takes its slice of each. Each rank's
loss is a weighted sum over its own samples, times the world size: DDP averages the
replicated tables' gradients over ranks, and TorchRec's all-to-alls divide the sharded
tables' gradients by the world size (`get_gradient_division()`), so the tables'
gradients are those of the whole batch, whatever the world size: the
losses and the pooled embeddings after training must agree between 1 and 2 ranks.
"""
import argparse
import json

import torch
import torch.distributed as dist

import torch_tpu  # noqa: F401  (the tpu device and backend; also autoloaded)
import torch_tpu.debug
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
from torchrec.distributed.types import ShardingEnv, ShardingPlan
from torchrec.optim.optimizers import in_backward_optimizer_filter
from fbgemm_gpu.split_embedding_configs import EmbOptimType
from torch_tpu.integrations.torchrec import place_plan_on_device
from torchrec.optim.keyed import KeyedOptimizerWrapper

TABLES, ROWS, DIM, BATCH, STEPS = 4, 32, 8, 8, 3
# TorchRec's compute kernel per sharding type: data_parallel replicates the tables
# (a dense TBE, gradients all-reduced by DDP, SGD applied by the optimizer below). The
# sharded types (table_wise, row_wise) use fbgemm's fused TBE: the optimizer (the
# sharder's fused_params) runs inside the backward, on the tables' device.
KERNEL = {"data_parallel": "dense", "table_wise": "fused", "row_wise": "fused"}
OPTIM = {"sgd": EmbOptimType.EXACT_SGD, "rowwise_adagrad": EmbOptimType.EXACT_ROWWISE_ADAGRAD}
LR = 0.1


def global_batch(step):
    """The whole batch of one step: per-sample bags of up to 3 ids per feature."""
    g = torch.Generator().manual_seed(100 + step)
    lengths = torch.randint(0, 4, (TABLES, BATCH), generator=g)
    ids = [torch.randint(0, ROWS, (int(lengths[t].sum()),), generator=g) for t in range(TABLES)]
    return lengths, ids


def local_kjt(step, rank, world):
    """This rank's samples of the step's batch, as a KeyedJaggedTensor."""
    lengths, ids = global_batch(step)
    per = BATCH // world
    lo, hi = rank * per, (rank + 1) * per
    vals, lens = [], []
    for t in range(TABLES):
        start = int(lengths[t, :lo].sum())
        stop = start + int(lengths[t, lo:hi].sum())
        vals.append(ids[t][start:stop])
        lens.append(lengths[t, lo:hi])
    return KeyedJaggedTensor(keys=[f"f{t}" for t in range(TABLES)], values=torch.cat(vals),
                             lengths=torch.cat(lens)), lo, hi


def in_feature_order(pooled):
    """The pooled embeddings as one [batch, features * DIM] tensor in f0, f1, ... order
    (a sharded EBC's KeyedTensor orders its keys by the rank that owns each table)."""
    pooled = pooled.wait() if hasattr(pooled, "wait") else pooled
    d = pooled.to_dict()
    return torch.cat([d[f"f{t}"] for t in range(TABLES)], dim=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("sharding", choices=sorted(KERNEL))
    p.add_argument("--optim", choices=sorted(OPTIM), default="sgd")
    p.add_argument("--cpu", action="store_true", help="CPU + Gloo (the reference)")
    args = p.parse_args()
    sharding = args.sharding
    dist.init_process_group("gloo" if args.cpu else "tpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu") if args.cpu else torch.device("tpu", torch.tpu.current_device())
    torch.manual_seed(0)  # the same tables on every rank and world size
    tables = [EmbeddingBagConfig(name=f"t{t}", embedding_dim=DIM, num_embeddings=ROWS,
                                 feature_names=[f"f{t}"]) for t in range(TABLES)]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    sharders = [EmbeddingBagCollectionSharder(
        fused_params={"optimizer": OPTIM[args.optim], "learning_rate": LR, "eps": 1e-8})]
    if sharding == "row_wise":
        # TorchRec's planner offers row_wise on cuda/mtia only: the plan is written out.
        plan = ShardingPlan({"": construct_module_sharding_plan(
            ebc, {f"t{t}": row_wise(compute_kernel=KERNEL[sharding]) for t in range(TABLES)},
            local_size=world, world_size=world, device_type=device.type)})
    else:
        constraints = {f"t{t}": ParameterConstraints(sharding_types=[sharding],
                                                     compute_kernels=[KERNEL[sharding]])
                       for t in range(TABLES)}
        planner = EmbeddingShardingPlanner(topology=Topology(world_size=world, compute_device="cpu"),
                                           constraints=constraints)
        plan = planner.collective_plan(ebc, sharders, dist.GroupMember.WORLD)
    if not args.cpu:
        plan = place_plan_on_device(plan, device)  # the planner names cpu (docs/torchrec.md)
    model = DistributedModelParallel(ebc, device=device, plan=plan, sharders=sharders,
                                     env=ShardingEnv.from_process_group(dist.GroupMember.WORLD))
    # Deterministic tables: row r of table t is (t + 1) * sin(r * DIM + column).
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            shards = ([(s.tensor, s.metadata.shard_offsets) for s in tensor.local_shards()]
                      if hasattr(tensor, "local_shards") else [(tensor, (0, 0))])
            for local, (r0, c0) in shards:
                rows, cols = local.shape
                t = int(name.split(".")[-2][1:])
                r = torch.arange(r0, r0 + rows)[:, None] * DIM + torch.arange(c0, c0 + cols)
                local.copy_((t + 1) * torch.sin(r.float()))
    # The fused tables' optimizer is inside their backward; this one steps the rest
    # (the replicated data_parallel tables).
    dense = dict(in_backward_optimizer_filter(model.named_parameters()))
    opt = KeyedOptimizerWrapper(dense, lambda params: torch.optim.SGD(params, lr=LR)) if dense else None
    weights = torch.linspace(-1, 1, TABLES * DIM)  # the loss's fixed per-column weights
    torch_tpu.debug.reset_metrics()
    losses = []
    for step in range(STEPS):
        kjt, lo, hi = local_kjt(step, rank, world)
        pooled = in_feature_order(model(kjt.to(device)))
        loss = (pooled ** 2 * weights.to(device)).sum()
        # Undo the division by the world size (DDP's mean, TorchRec's gradient division).
        scale = world
        if opt:
            opt.zero_grad()
        (loss * scale).backward()
        if opt:
            opt.step()
        total = loss.detach().cpu()
        dist.all_reduce(total)
        losses.append(float(total))
    kjt, lo, hi = local_kjt(0, rank, world)
    with torch.no_grad():
        pooled = in_feature_order(model(kjt.to(device)))
    gathered = [None] * world
    dist.all_gather_object(gathered, (pooled.cpu().tolist(),
                                      str(pooled.device),
                                      torch_tpu.debug.metrics()["cpu_fallback_counts"]))
    if rank == 0:
        out = [row for rows, _, _ in gathered for row in rows]
        print("RESULT " + json.dumps({
            "world": world, "losses": losses, "pooled": out,
            "devices": [d for _, d, _ in gathered],
            "fallbacks": [f for _, _, f in gathered],
            "plan": str(plan)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""The TorchRec DLRM (torchrec_model.py) under torchrun with DistributedModelParallel:
tables sharded table-wise or row-wise over the ranks (fbgemm's fused TBE, row-wise
Adagrad inside the backward), the MLPs replicated (DDP), ids and pooled embeddings
exchanged by all-to-alls on the process group. See docs/torchrec.md.

    torchrun --nproc_per_node 2 examples/dlrm/train.py --torchrec --sharding table_wise
"""
import torch
import torch.distributed as dist


_groups = {}


def process_group(device):
    """torchrun's ranks, with the `tpu` backend for tpu and Gloo for the CPU (--check
    trains on both in one run: a Gloo group of the same ranks for the CPU)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo" if device.type == "cpu" else "tpu")
    want = "gloo" if device.type == "cpu" else "tpu"
    if dist.get_backend() == want:
        return dist.GroupMember.WORLD
    if want not in _groups:
        _groups[want] = dist.new_group(backend=want)
    return _groups[want]


def shard(model, sharding, device, lr):
    """(DMP-wrapped model, optimizer of its dense parameters). The tables start as
    `model`'s (whatever the world size), copied shard by shard."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
    from torchrec.distributed.types import ShardingEnv, ShardingPlan
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    pg = process_group(device)
    world = dist.get_world_size(pg)
    tables = {name: p.detach().cpu().clone() for name, p in model.ebc.named_parameters()}
    sharders = [EmbeddingBagCollectionSharder(fused_params={
        "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": lr, "eps": 1e-8})]
    names = [c.name for c in model.ebc.embedding_bag_configs()]
    if sharding == "row_wise":  # TorchRec's planner offers row_wise for cuda/mtia only
        plan = ShardingPlan({"ebc": construct_module_sharding_plan(
            model.ebc, {n: row_wise(compute_kernel="fused") for n in names},
            local_size=world, world_size=world, device_type=device.type)})
    else:
        planner = EmbeddingShardingPlanner(
            topology=Topology(world_size=world, compute_device="cpu"),
            constraints={n: ParameterConstraints(sharding_types=[sharding],
                                                 compute_kernels=["fused"]) for n in names})
        plan = planner.collective_plan(model, sharders, pg)
    if device.type != "cpu":
        from torch_tpu.integrations.torchrec import place_plan_on_device
        plan = place_plan_on_device(plan, device)
    dmp = DistributedModelParallel(model, device=device, plan=plan, sharders=sharders,
                                   env=ShardingEnv.from_process_group(pg))
    with torch.no_grad():
        for name, t in dmp.state_dict().items():
            key = name.split("ebc.embedding_bags.")[-1].replace(".weight", "")
            full = tables.get(f"embedding_bags.{key}.weight")
            if full is None or not hasattr(t, "local_shards"):
                continue
            for s in t.local_shards():
                (r, c), (h, w) = s.metadata.shard_offsets, s.metadata.shard_sizes
                s.tensor.copy_(full[r:r + h, c:c + w])
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    return dmp, KeyedOptimizerWrapper(dense, lambda ps: torch.optim.Adagrad(ps, lr=lr))


def local_batch(batch):
    """This rank's slice of a global batch (every rank draws the same one)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per = batch[0].shape[0] // world
    return tuple(t[rank * per:(rank + 1) * per] for t in batch)

"""TorchRec sharding plans for tables on tpu: an opt-in (docs/torchrec.md).

TorchRec's planner knows three compute devices (`Topology(compute_device=...)` asserts
cpu, cuda or mtia; `planner.utils.placement` names a device index only for cuda/mtia),
and `construct_module_sharding_plan(..., device_type="tpu")` numbers devices by rank
(`tpu:1` on rank 1), while every torch_tpu process drives its own `tpu:0`. A plan's
shard placements must name the device the shard's tensor is on, or `ShardedTensor`
refuses it ("Local shard tensor device does not match"). So plan as for the CPU and
move the plan's placements to tpu before `DistributedModelParallel`:

    from torch_tpu.integrations.torchrec import place_plan_on_device

    planner = EmbeddingShardingPlanner(topology=Topology(world_size=world, compute_device="cpu"))
    plan = place_plan_on_device(planner.collective_plan(ebc, sharders, pg), device)
    model = DistributedModelParallel(ebc, device=device, plan=plan, sharders=sharders)

This edits the plan (the user's data), nothing of TorchRec. With that, TorchRec builds
fbgemm's fused TBE modules (compute kernel `fused`) on tpu in fbgemm's host layout, as
it does for MTIA, and their lookups and fused optimizers run as torch_tpu kernels
(csrc/aten/tbe_fused_kernels.cc).

The upstream change that removes it: TorchRec's `Topology` and `placement()` accepting
the PrivateUse1 backend (`torch._C._get_privateuse1_backend_name()`) and taking the
device index from the backend's current device instead of `rank % local_size`.
"""
import torch


def place_plan_on_device(plan, device=None):
    """Points every shard placement of a TorchRec `ShardingPlan` at `device` (default:
    this process's tpu device), keeping each shard's rank. Returns `plan`, edited in
    place. Replicated (`data_parallel`) tables have no placements and are left as they
    are."""
    if device is None:
        device = torch.device("tpu", torch.tpu.current_device())
    device = torch.device(device)
    if device.index is None:
        device = torch.device(device.type, 0)
    for module_plan in plan.plan.values():
        for sharding in module_plan.values():
            spec = getattr(sharding, "sharding_spec", None)
            for shard in getattr(spec, "shards", None) or []:
                shard.placement = type(shard.placement)(f"rank:{shard.placement.rank()}/{device}")
    return plan

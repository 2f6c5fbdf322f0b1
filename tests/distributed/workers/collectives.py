"""Every collective of the tpu process group, every reduce op and dtype, against
values computed on the CPU. Run under torchrun (2 or 4 processes); each rank
prints `CHECKS PASSED <n>` or the list of failures and exits 1.
"""
import datetime
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed import ReduceOp
from torch.distributed.device_mesh import init_device_mesh

TPU = torch.device("tpu")
FAILURES = []
PASSED = [0]

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32, torch.int64,
          torch.int8, torch.uint8, torch.int16, torch.bool]
FLOATS = {torch.float32, torch.bfloat16, torch.float16, torch.float64}


def check(name, got, want):
    try:
        assert isinstance(got, torch.Tensor) and got.device.type == "tpu", f"not on tpu: {got}"
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        PASSED[0] += 1
    except Exception as e:  # collected, so that one run reports every failure
        FAILURES.append(f"{name}: {e}")


def case(fn):
    """Runs one group of checks; an exception fails it without stopping the rest
    (every rank runs the same collectives, so none is left waiting)."""
    try:
        fn()
    except Exception:
        FAILURES.append(f"{fn.__name__} raised:\n{traceback.format_exc()}")
    return fn


def value(rank, dtype, n=6):
    """Rank-dependent small integers: exact in every dtype and every reduction."""
    base = (torch.arange(n) % 3) + rank + 1
    if dtype == torch.bool:
        return ((torch.arange(n) + rank) % 3) != 0
    return base.to(dtype)


def on_tpu(cpu):
    """A tpu tensor holding `cpu`; in Defer & Fuse a pending value (a recorded
    clone), so that the collective has to run the pending graph first."""
    return cpu.to(TPU).clone()


def reference(op, xs, dtype, world):
    s = torch.stack(xs)
    if dtype == torch.bool:
        return {ReduceOp.SUM: s.any(0), ReduceOp.MAX: s.any(0), ReduceOp.BOR: s.any(0),
                ReduceOp.PRODUCT: s.all(0), ReduceOp.MIN: s.all(0), ReduceOp.BAND: s.all(0),
                ReduceOp.BXOR: (s.sum(0) % 2) == 1}[op]
    if op == ReduceOp.SUM:
        return s.sum(0).to(dtype)
    if op == ReduceOp.AVG:
        total = s.to(torch.float64).sum(0)
        return (total / world).to(dtype) if dtype in FLOATS else torch.div(
            s.sum(0), world, rounding_mode="trunc").to(dtype)
    if op == ReduceOp.PRODUCT:
        return s.prod(0).to(dtype)
    if op == ReduceOp.MIN:
        return s.min(0).values
    if op == ReduceOp.MAX:
        return s.max(0).values
    out = s[0].clone()
    for x in s[1:]:
        out = {ReduceOp.BAND: out & x, ReduceOp.BOR: out | x, ReduceOp.BXOR: out ^ x}[op]
    return out


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = lambda dtype, n=6: [value(k, dtype, n) for k in range(world)]  # noqa: E731

    @case
    def backend_identity():
        pg = dist.group.WORLD
        backend = pg._get_backend(TPU)
        assert type(backend).__name__ == "TpuBackend", type(backend)
        assert dist.get_backend() == "tpu"
        assert backend.transport.startswith("host-staged"), backend.transport
        # A tpu group serves CPU tensors too (its Gloo transport), so, as for
        # PyTorch's "cpu:gloo,cuda:nccl", object collectives use the CPU.
        assert set(pg._device_types) == {torch.device("tpu"), torch.device("cpu")}
        assert dist.distributed_c10d._get_object_coll_device() == "cpu"
        named = dist.new_group(list(range(world)), group_desc="my_subgroup")
        assert named.group_desc == "my_subgroup", named.group_desc
        assert named._get_backend(TPU).name() == "tpu"
        PASSED[0] += 1

    @case
    def all_reduce_ops_dtypes():
        for dtype in DTYPES:
            ops = [ReduceOp.SUM, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.PRODUCT]
            if dtype != torch.bool:
                ops.append(ReduceOp.AVG)
            if dtype not in FLOATS:
                ops += [ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR]
            for op in ops:
                t = on_tpu(value(rank, dtype))
                dist.all_reduce(t, op=op)
                check(f"all_reduce {op} {dtype}", t, reference(op, everyone(dtype), dtype, world))

    @case
    def all_reduce_premul_sum():
        for dtype in sorted(FLOATS, key=str):
            t = on_tpu(value(rank, dtype))
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
            check(f"premul_sum {dtype}", t, (torch.stack(everyone(dtype)) * 2).sum(0).to(dtype))
        t = on_tpu(value(rank, torch.float32))
        factor = torch.tensor(0.5, device=TPU)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        check("premul_sum tensor factor", t, torch.stack(everyone(torch.float32)).sum(0) * 0.5)

    @case
    def all_reduce_bad_op():
        try:
            dist.all_reduce(on_tpu(value(rank, torch.bool)), op=ReduceOp.AVG)
        except (RuntimeError, ValueError) as e:
            assert "AVG is not supported for Bool" in str(e), str(e)
            PASSED[0] += 1
        else:
            FAILURES.append("all_reduce AVG on bool did not raise")

    @case
    def shapes_and_views():
        t = on_tpu(torch.tensor(float(rank + 1)))  # 0-d
        dist.all_reduce(t)
        check("all_reduce 0-d", t, torch.tensor(float(sum(range(1, world + 1)))))
        e = torch.empty(0, device=TPU)
        dist.all_reduce(e)
        check("all_reduce empty", e, torch.empty(0))
        # A strided view: only its elements change, in place in the base.
        base = on_tpu(torch.arange(12.).reshape(3, 4) + rank)
        col = base[:, 1]
        dist.all_reduce(col)
        want = torch.arange(12.).reshape(3, 4) + rank
        want[:, 1] = sum(torch.arange(12.).reshape(3, 4)[:, 1] + k for k in range(world))
        check("all_reduce strided view", base, want)
        big = on_tpu(torch.arange(2048 * 1024, dtype=torch.float32)) * (rank + 1)  # 8 MB
        dist.all_reduce(big)
        check("all_reduce 8MB", big,
              torch.arange(2048 * 1024, dtype=torch.float32) * sum(range(1, world + 1)))

    @case
    def coalesced():
        a, b = on_tpu(value(rank, torch.float32)), on_tpu(value(rank, torch.int64, 5))
        with dist._coalescing_manager():
            dist.all_reduce(a)
            dist.all_reduce(b)
        check("allreduce_coalesced a", a, torch.stack(everyone(torch.float32)).sum(0))
        check("allreduce_coalesced b", b, torch.stack(everyone(torch.int64, 5)).sum(0))
        outs = [torch.empty(6 * world, device=TPU), torch.empty(4 * world, device=TPU)]
        ins = [on_tpu(value(rank, torch.float32)), on_tpu(value(rank, torch.float32, 4))]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        check("allgather_into_tensor_coalesced 0", outs[0], torch.cat(everyone(torch.float32)))
        check("allgather_into_tensor_coalesced 1", outs[1], torch.cat(everyone(torch.float32, 4)))
        outs = [torch.empty(3, device=TPU), torch.empty(2, device=TPU)]
        ins = [on_tpu(value(rank, torch.float32, 3 * world)),
               on_tpu(value(rank, torch.float32, 2 * world))]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i)
        for j, (o, n) in enumerate(zip(outs, (3, 2))):
            full = torch.stack(everyone(torch.float32, n * world)).sum(0)
            check(f"reduce_scatter_tensor_coalesced {j}", o, full[rank * n:(rank + 1) * n])

    @case
    def broadcast_all_dtypes():
        for dtype in DTYPES:
            t = on_tpu(value(rank, dtype))
            dist.broadcast(t, src=world - 1)
            check(f"broadcast {dtype}", t, value(world - 1, dtype))

    @case
    def all_gather_all_dtypes():
        for dtype in DTYPES:
            outs = [torch.zeros(6, dtype=dtype, device=TPU) for _ in range(world)]  # pending zeros
            dist.all_gather(outs, on_tpu(value(rank, dtype)))
            for k in range(world):
                check(f"all_gather {dtype} [{k}]", outs[k], value(k, dtype))
            out = torch.empty(6 * world, dtype=dtype, device=TPU)
            dist.all_gather_into_tensor(out, on_tpu(value(rank, dtype)))
            check(f"all_gather_into_tensor {dtype}", out, torch.cat(everyone(dtype)))

    @case
    def reduce_scatter_ops():
        for dtype in (torch.float32, torch.bfloat16, torch.int32):
            for op in (ReduceOp.SUM, ReduceOp.MAX, ReduceOp.AVG):
                ins = [on_tpu(value(rank * world + j, dtype, 4)) for j in range(world)]
                out = torch.empty(4, dtype=dtype, device=TPU)
                dist.reduce_scatter(out, ins, op=op)
                want = reference(op, [value(k * world + rank, dtype, 4) for k in range(world)],
                                 dtype, world)
                check(f"reduce_scatter {op} {dtype}", out, want)
                inp = on_tpu(torch.cat([value(rank * world + j, dtype, 4) for j in range(world)]))
                out = torch.empty(4, dtype=dtype, device=TPU)
                dist.reduce_scatter_tensor(out, inp, op=op)
                check(f"reduce_scatter_tensor {op} {dtype}", out, want)

    @case
    def all_to_all():
        for dtype in (torch.float32, torch.int16, torch.bool):
            inp = on_tpu(torch.stack([value(rank * world + j, dtype, 3) for j in range(world)]))
            out = torch.empty(world, 3, dtype=dtype, device=TPU)
            dist.all_to_all_single(out, inp)
            check(f"all_to_all_single {dtype}", out,
                  torch.stack([value(k * world + rank, dtype, 3) for k in range(world)]))
        # Uneven splits: rank k sends j+1 rows to rank j.
        rows = lambda src, dst: torch.full((dst + 1, 2), float(10 * src + dst))  # noqa: E731
        inp = on_tpu(torch.cat([rows(rank, j) for j in range(world)]))
        out = torch.empty((rank + 1) * world, 2, device=TPU)
        dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * world,
                               input_split_sizes=[j + 1 for j in range(world)])
        check("all_to_all_single uneven", out, torch.cat([rows(k, rank) for k in range(world)]))
        ins = [on_tpu(value(rank * world + j, torch.float32, 2)) for j in range(world)]
        outs = [torch.empty(2, device=TPU) for _ in range(world)]
        dist.all_to_all(outs, ins)
        for k in range(world):
            check(f"all_to_all [{k}]", outs[k], value(k * world + rank, torch.float32, 2))

    @case
    def rooted():
        root = world - 1
        t = on_tpu(value(rank, torch.float32))
        dist.reduce(t, dst=root, op=ReduceOp.MAX)
        if rank == root:
            check("reduce", t, torch.stack(everyone(torch.float32)).max(0).values)
        out = torch.empty(6, dtype=torch.int64, device=TPU)
        scatter_list = [on_tpu(value(j, torch.int64)) for j in range(world)] if rank == 0 else None
        dist.scatter(out, scatter_list, src=0)
        check("scatter", out, value(rank, torch.int64))
        gather_list = [torch.empty(6, device=TPU) for _ in range(world)] if rank == root else None
        dist.gather(on_tpu(value(rank, torch.float32)), gather_list, dst=root)
        if rank == root:
            for k in range(world):
                check(f"gather [{k}]", gather_list[k], value(k, torch.float32))
        dist.barrier()
        objs = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        assert objs == [{"rank": k} for k in range(world)], objs
        lst = [rank * 7] if rank == 0 else [None]
        dist.broadcast_object_list(lst, src=0)
        assert lst == [0], lst
        PASSED[0] += 1

    @case
    def point_to_point():
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        # Every rank sends before it receives: only truly asynchronous sends let this finish.
        send = on_tpu(value(rank, torch.bfloat16))
        recv = torch.empty(6, dtype=torch.bfloat16, device=TPU)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                       dist.P2POp(dist.irecv, recv, prv)])
        for r in reqs:
            r.wait()
        check("batch_isend_irecv ring", recv, value(prv, torch.bfloat16))
        if rank == 0:
            dist.send(on_tpu(value(0, torch.int32)), dst=1)
            t = torch.empty(6, dtype=torch.int32, device=TPU)
            dist.recv(t, src=1)
            check("send/recv 1->0", t, value(1, torch.int32))
        elif rank == 1:
            t = torch.empty(6, dtype=torch.int32, device=TPU)
            dist.recv(t, src=0)
            check("send/recv 0->1", t, value(0, torch.int32))
            dist.send(on_tpu(value(1, torch.int32)), dst=0)

    @case
    def work_and_future():
        t = on_tpu(value(rank, torch.float32))
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future().then(lambda f: f.value()[0] * 2)
        assert work.wait()
        assert work.is_completed() and work.is_success()
        total = torch.stack(everyone(torch.float32)).sum(0)
        check("work result", t, total)
        doubled = fut.wait()
        check("future .then on tpu", doubled, total * 2)
        out = torch.empty(6 * world, device=TPU)
        w2 = dist.all_gather_into_tensor(out, on_tpu(value(rank, torch.float32)), async_op=True)
        w2.get_future().wait()  # waiting on the future alone completes the copy back
        check("future of all_gather_into_tensor", out, torch.cat(everyone(torch.float32)))

    @case
    def functional_collectives():
        group = dist.group.WORLD
        t = on_tpu(value(rank, torch.float32))
        check("funcol all_reduce", funcol.all_reduce(t, "sum", group),
              torch.stack(everyone(torch.float32)).sum(0))
        check("funcol all_gather_tensor", funcol.all_gather_tensor(t, 0, group),
              torch.cat(everyone(torch.float32)))
        big = on_tpu(torch.cat([value(rank * world + j, torch.float32, 2) for j in range(world)]))
        check("funcol reduce_scatter_tensor", funcol.reduce_scatter_tensor(big, "sum", 0, group),
              sum(value(k * world + rank, torch.float32, 2) for k in range(world)))
        check("funcol all_to_all_single",
              funcol.all_to_all_single(big, None, None, group),
              torch.cat([value(k * world + rank, torch.float32, 2) for k in range(world)]))

    @case
    def subgroups():
        # Each rank alone, then pairs (4 ranks), then a DeviceMesh's dimensions.
        mine, _ = dist.new_subgroups(group_size=1)
        t = on_tpu(value(rank, torch.float32))
        dist.all_reduce(t, group=mine)
        check("subgroup of one", t, value(rank, torch.float32))
        if world == 4:
            pair, _ = dist.new_subgroups(group_size=2)
            t = on_tpu(value(rank, torch.float32))
            dist.all_reduce(t, group=pair)
            lo = rank - rank % 2
            check("subgroup pair", t, value(lo, torch.float32) + value(lo + 1, torch.float32))
            mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
            for dim in ("dp", "tp"):
                g = mesh.get_group(dim)
                t = on_tpu(value(rank, torch.float32))
                dist.all_reduce(t, group=g)
                peers = dist.get_process_group_ranks(g)
                check(f"mesh {dim}", t, sum(value(k, torch.float32) for k in peers))
                out = torch.empty(12, device=TPU)
                dist.all_gather_into_tensor(out, on_tpu(value(rank, torch.float32)), group=g)
                check(f"mesh {dim} all_gather", out,
                      torch.cat([value(k, torch.float32) for k in peers]))
        else:
            mesh = init_device_mesh("tpu", (world,), mesh_dim_names=("dp",))
            t = on_tpu(value(rank, torch.float32))
            dist.all_reduce(t, group=mesh.get_group("dp"))
            check("mesh dp", t, torch.stack(everyone(torch.float32)).sum(0))

    @case
    def bad_arguments():
        # Checked before any data moves, identically on every rank: nobody waits.
        out = torch.empty(5, device=TPU)
        try:
            dist.all_gather_into_tensor(out, on_tpu(value(rank, torch.float32)))
        except (RuntimeError, ValueError) as e:
            assert "tpu process group" in str(e) or "size" in str(e), str(e)
            PASSED[0] += 1
        else:
            FAILURES.append("all_gather_into_tensor with a wrong output size did not raise")

    dist.barrier()
    dist.destroy_process_group()
    if FAILURES:
        print(f"rank {rank}: {len(FAILURES)} FAILURES:\n" + "\n".join(FAILURES), flush=True)
        sys.exit(1)
    print(f"rank {rank}: CHECKS PASSED {PASSED[0]}", flush=True)


if __name__ == "__main__":
    main()

"""Host staging's memory reuse under torchrun (2 processes): large allreduces go
to Gloo in pieces (TORCH_TPU_DIST_PIECE_MB, set small by the test) from pooled
host memory, and their results alias that memory on the CPU plugin. Checks:
values equal the CPU reference for sizes that are and are not a multiple of the
piece; a result stays intact while later collectives reuse the pool and while
in-place ops (which may donate buffers) rewrite it; the pool is reused in the
steady state. Prints `rank <r>: STAGING OK` or raises."""
import datetime

import torch
import torch.distributed as dist
import torch_tpu

TPU = torch.device("tpu")


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    stats = torch_tpu._C._distributed._staging_pool_stats
    total = world * (world + 1) / 2
    for n in (3 * 2 ** 18 + 7, 2 ** 18, 1000):  # 3 MB + 28 B: 4 pieces of 1 MB, the last short
        base = torch.arange(n, dtype=torch.float32) % 97
        t = (base * (rank + 1)).to(TPU)
        dist.all_reduce(t)
        torch.testing.assert_close(t.cpu(), base * total, rtol=0, atol=0)
        kept = t
        for _ in range(3):  # same size: pooled blocks come back
            u = (base * (rank + 1)).to(TPU)
            dist.all_reduce(u, op=dist.ReduceOp.MAX)
            torch.testing.assert_close(u.cpu(), base * world, rtol=0, atol=0)
        torch.testing.assert_close(kept.cpu(), base * total, rtol=0, atol=0)
        kept.mul_(2)  # in place over an aliased result
        kept.add_(1)
        torch.testing.assert_close(kept.cpu(), base * total * 2 + 1, rtol=0, atol=0)
        v = torch.ones(n, device=TPU)
        dist.all_reduce(v)
        torch.testing.assert_close(kept.cpu(), base * total * 2 + 1, rtol=0, atol=0)
        torch.testing.assert_close(v.cpu(), torch.full((n,), float(world)), rtol=0, atol=0)
        # A program's output (pending until the collective flushes it), read in place.
        w = torch.ones(n, device=TPU) * (rank + 1) + base.to(TPU)
        dist.all_reduce(w)
        torch.testing.assert_close(w.cpu(), base * world + total, rtol=0, atol=0)
        # bf16 and AVG (a conversion / post-division path) stay right too.
        h = (base * (rank + 1)).to(torch.bfloat16).to(TPU)
        dist.all_reduce(h, op=dist.ReduceOp.AVG)
        torch.testing.assert_close(h.cpu(), (base * total / world).to(torch.bfloat16),
                                   rtol=1e-2, atol=1e-2)
    s = stats()
    assert s["reuses"] >= 3 * 2, s  # at least two of the same-size rounds per size reuse
    print(f"rank {rank}: STAGING OK {s}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

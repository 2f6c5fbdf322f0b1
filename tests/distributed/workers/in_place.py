"""Allreduce straight on a tpu tensor's device buffer (the CPU plugin's device
memory is host memory: csrc/dist/in_place_reduce.h), under torchrun (2
processes). Each case checks the values against the CPU reference and which
path ran (torch_tpu._C._distributed._in_place_stats):
  in place:  a tensor that is its storage's only holder; a whole-storage view
             (the other views of the storage see the result); AVG (divided in
             place), MAX, bf16, int; a tensor a program launched just before
             still reads (that program's output keeps the old values); the
             result rewritten by in-place ops afterwards (the buffer is free to
             donate again, even while the Work object lives).
  staged:    a view of part of a larger storage (the rest stays as it was); a
             non-contiguous tensor; a tensor another thread's pending Defer &
             Fuse graph still reads (that graph sees the old values); PREMUL_SUM
             and bool (converted on the host); TORCH_TPU_DIST_IN_PLACE=0.
  mixed:     one rank staged, the other in place, for a message Gloo gets in
             pieces: both post the same pieces.
Prints `rank <r>: IN PLACE OK` or raises."""
import datetime
import os
import threading

import torch
import torch.distributed as dist
import torch_tpu

TPU = torch.device("tpu")
stats = torch_tpu._C._distributed._in_place_stats
ENABLED = torch_tpu.settings.get("TORCH_TPU_DIST_IN_PLACE")


def expect(path, fn):
    """Runs fn() and checks that its allreduce took `path` ("in_place" or "staged")."""
    before = stats()
    fn()
    after = stats()
    ran = {k: after[k] - before[k] for k in after}
    want = "in_place" if path == "in_place" and ENABLED else "declined"
    assert ran[want] == 1 and sum(ran.values()) == 1, (path, ran)


def same(a, b):
    torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0)


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    total = world * (world + 1) / 2
    n = 3 * 2 ** 18 + 5  # 3 MB and a bit: large enough for the pieced staged path too
    base = torch.arange(n, dtype=torch.float32) % 89

    t = (base * (rank + 1)).to(TPU)
    expect("in_place", lambda: dist.all_reduce(t))
    same(t, base * total)
    a = (base * (rank + 1)).to(TPU)
    expect("in_place", lambda: dist.all_reduce(a, op=dist.ReduceOp.AVG))
    same(a, base * total / world)
    m = (base * (rank + 1)).to(TPU)
    expect("in_place", lambda: dist.all_reduce(m, op=dist.ReduceOp.MAX))
    same(m, base * world)
    h = (base * (rank + 1)).to(torch.bfloat16).to(TPU)
    expect("in_place", lambda: dist.all_reduce(h))
    torch.testing.assert_close(h.cpu().float(), base * total, rtol=1e-2, atol=1e-2)
    i = torch.full((1000,), 7 * (rank + 1), dtype=torch.int32, device=TPU)
    expect("in_place", lambda: dist.all_reduce(i, op=dist.ReduceOp.AVG))
    same(i, torch.full((1000,), int(7 * total) // world, dtype=torch.int32))

    # A whole-storage view: every view of the storage sees the reduced values.
    flat = (base * (rank + 1)).to(TPU)
    rows = flat.view(1, n)
    tail = flat[n // 2:]
    expect("in_place", lambda: dist.all_reduce(rows))
    same(flat, base * total)
    same(tail, (base * total)[n // 2:])

    # A view of part of a larger storage: staged, and the rest is untouched.
    big = (base * (rank + 1)).to(TPU)
    head = big[: n // 2]
    expect("staged", lambda: dist.all_reduce(head))
    same(big, torch.cat([(base * total)[: n // 2], (base * (rank + 1))[n // 2:]]))

    # Non-contiguous: staged.
    sq = (torch.arange(64 * 48, dtype=torch.float32).view(64, 48) * (rank + 1)).to(TPU)
    sq_t = sq.t()
    expect("staged", lambda: dist.all_reduce(sq_t))
    same(sq, torch.arange(64 * 48, dtype=torch.float32).view(64, 48) * total)

    # PREMUL_SUM (scaled on the host) and bool (reduced as uint8): staged.
    p = (base * (rank + 1)).to(TPU)
    dist.all_reduce(p, op=dist._make_nccl_premul_sum(0.5))
    same(p, base * total * 0.5)
    b = (torch.arange(100) % (rank + 2) == 0).to(TPU)
    dist.all_reduce(b)
    same(b, sum((torch.arange(100) % (r + 2) == 0).int() for r in range(world)) > 0)

    # A program launched just before reads the tensor: it keeps the old values.
    r = (base * (rank + 1)).to(TPU)
    torch.tpu.synchronize()
    doubled = r * 2
    expect("in_place", lambda: dist.all_reduce(r))
    same(doubled, base * (rank + 1) * 2)
    same(r, base * total)

    # Another thread's pending graph holds the buffer: staged; that graph sees
    # the values it recorded against.
    q = (base * (rank + 1)).to(TPU)
    torch.tpu.synchronize()
    recorded, go, seen = threading.Event(), threading.Event(), {}

    def other_thread():
        y = q * 3  # pending in this thread's graph under Defer & Fuse
        recorded.set()
        go.wait()
        seen["y"] = y.cpu()

    th = threading.Thread(target=other_thread)
    th.start()
    recorded.wait()
    path = "staged" if torch_tpu.settings.get("TORCH_TPU_EXECUTION_MODE") == "defer_and_fuse" else "in_place"
    expect(path, lambda: dist.all_reduce(q))
    go.set()
    th.join()
    torch.testing.assert_close(seen["y"], base * (rank + 1) * 3, rtol=0, atol=0)
    same(q, base * total)

    # The result rewritten in place afterwards (such ops may donate the buffer:
    # the collective must have let go of it), while its Work object lives.
    u = (base * (rank + 1)).to(TPU)
    work = []
    expect("in_place", lambda: work.append(dist.all_reduce(u, async_op=True)))
    work[0].wait()
    u.mul_(2)
    u.add_(1)
    same(u, base * total * 2 + 1)
    del work
    expect("in_place", lambda: dist.all_reduce(u))
    same(u, (base * total * 2 + 1) * world)

    # Ranks that choose differently (rank 0's tensor is part of a larger
    # storage: staged; the others': in place) still post matching collectives
    # for a message Gloo gets in pieces (9 MB: pieces from 8 MB).
    k = 9 * 2 ** 18
    vals = torch.arange(k, dtype=torch.float32) % 83
    if rank == 0:
        holder = torch.cat([vals, torch.zeros(16)]).to(TPU)
        x = holder[:k]
    else:
        x = (vals * (rank + 1)).to(TPU)
    expect("staged" if rank == 0 else "in_place", lambda: dist.all_reduce(x))
    same(x, vals * total)

    print(f"rank {rank}: IN PLACE OK {stats()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""torch.distributed on tpu: what host staging costs, and minGPT DDP step time.

1. all_reduce (SUM, float32) bus bandwidth by message size, 1 KB to 64 MB, for
   tpu tensors through the `tpu` backend (flush, copy to host, Gloo, copy back)
   beside PyTorch's Gloo on CPU tensors of the same size, in one "cpu:gloo,tpu:tpu"
   group of --nproc processes (median of the timed iterations; bus bandwidth =
   2 (n-1)/n * bytes / time, as nccl-tests reports it). Target: at 4 MB and above
   the tpu row costs at most 1.2x Gloo's own time.
2. minGPT DDP training step (examples/distributed/ddp_mingpt.py) at 1 and 2
   processes, Defer & Fuse, steps after the first two.

    python benchmarks/distributed.py                 # both, 2 processes
    python benchmarks/distributed.py --skip-ddp --max-mb 16
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def worker(args):
    import torch
    import torch.distributed as dist
    dist.init_process_group("cpu:gloo,tpu:tpu", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    size = 1024
    rows = []
    while size <= args.max_mb * 2 ** 20:
        n = size // 4
        iters = max(3, min(50, int(64 * 2 ** 20 / size)))
        times = {}
        for device in ("cpu", "tpu"):
            t = torch.ones(n, device=device)
            for _ in range(2):  # warm-up: connections, programs, allocations
                dist.all_reduce(t)
            samples = []
            for _ in range(iters):
                start = time.perf_counter()
                dist.all_reduce(t)
                if device == "tpu":
                    torch.tpu.synchronize()
                samples.append(time.perf_counter() - start)
            times[device] = statistics.median(samples)
        rows.append((size, times["cpu"], times["tpu"]))
        size *= 4
    if rank == 0:
        factor = 2 * (world - 1) / world
        print(f"| bytes | gloo cpu ms | gloo GB/s | tpu ms | tpu GB/s | tpu/gloo |")
        print("|---:|---:|---:|---:|---:|---:|")
        for size, c, t in rows:
            print(f"| {size} | {c * 1e3:.3f} | {factor * size / c / 1e9:.3f} | {t * 1e3:.3f} | "
                  f"{factor * size / t / 1e9:.3f} | {t / c:.2f} |", flush=True)
        big = [t / c for size, c, t in rows if size >= 4 * 2 ** 20]
        if big:
            print(f"worst tpu/gloo time ratio at >= 4 MB: {max(big):.2f} (target <= 1.2)", flush=True)
    dist.destroy_process_group()


def torchrun(nproc, script, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", script, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--max-mb", type=int, default=64)
    p.add_argument("--skip-ddp", action="store_true")
    p.add_argument("--ddp-steps", type=int, default=12)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    print(f"## all_reduce, {args.nproc} processes (loopback)\n")
    print(torchrun(args.nproc, __file__, "--worker", "--max-mb", str(args.max_mb)))
    if args.skip_ddp:
        return
    print("## minGPT DDP step (Defer & Fuse; the first two steps left out)\n")
    script = os.path.join(ROOT, "examples", "distributed", "ddp_mingpt.py")
    for nproc in (1, 2):
        out = torchrun(nproc, script, "--steps", str(args.ddp_steps), "--warmup", "2")
        m = re.search(r"([\d.]+) ms/step", out)
        print(f"- {nproc} process(es): {m.group(1) if m else '?'} ms/step "
              f"(global batch 8, so 2 processes do half the work each)", flush=True)


if __name__ == "__main__":
    main()

"""torch.distributed on tpu: what host staging costs, and minGPT DDP step time.

1. all_reduce (SUM, float32) bus bandwidth by message size, 1 KB to 64 MB, for
   tpu tensors through the `tpu` backend (on the CPU plugin Gloo reduces the
   device buffer in place when nothing else holds it; otherwise flush, copy to
   host, Gloo, copy back) beside PyTorch's Gloo on CPU tensors of the same size,
   in one "cpu:gloo,tpu:tpu" group of --nproc processes. The sweep runs --rounds
   times; in each, Gloo and tpu iterations are interleaved in alternating order so
   that a loaded machine slows both alike, and each size reports the median over
   rounds of the round's median-time ratio (times: medians of all iterations; the
   last column compares the fastest iterations; bus bandwidth = 2 (n-1)/n *
   bytes / time, as nccl-tests reports it). Target: at 4 MB and above the tpu
   row costs at most 1.2x Gloo's own time.
2. minGPT training step with DDP (examples/distributed/ddp_mingpt.py) and with
   FSDP2 (fsdp_mingpt.py) at 1 and 2 processes, Defer & Fuse, steps after the
   first two.

    python benchmarks/distributed.py                 # both, 2 processes
    python benchmarks/distributed.py --skip-ddp --max-mb 16
    TORCH_TPU_DIST_PROFILE=1 python benchmarks/distributed.py --skip-ddp  # + per-phase times

On the CPU plugin Gloo reduces a tpu tensor's own device buffer (its memory is
host memory) when nothing else can see it (csrc/dist/in_place_reduce.h): no copy
out, no copy back. TORCH_TPU_DIST_IN_PLACE=0 stages through host memory instead
(as on other platforms); TORCH_TPU_DIST_PIECE_MB (piece size, 0: none) and
TORCH_TPU_DIST_HOST_VIEW=0 (no in-place read of the CPU plugin's buffers) select
other staging plans to compare.
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
    import torch_tpu
    dist.init_process_group("cpu:gloo,tpu:tpu", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = []
    size = 1024
    while size <= args.max_mb * 2 ** 20:
        sizes.append(size)
        size *= 4
    tensors = {size: {d: torch.ones(size // 4, device=d) for d in ("cpu", "tpu")} for size in sizes}
    for by_device in tensors.values():
        for t in by_device.values():
            for _ in range(2):  # warm-up: connections, programs, allocations
                dist.all_reduce(t)
    torch.tpu.synchronize()
    # The sweep runs --rounds times; each size reports the median over rounds of
    # that round's tpu/gloo ratio, so that one round in which 2 busy cores woke
    # Gloo's threads late does not decide the figure.
    samples = {size: {"cpu": [], "tpu": []} for size in sizes}
    ratios = {size: [] for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            # At least 25 timed iterations at every size: with 7 (the old floor,
            # reached from 16 MB up) the median ratio moved by 0.2 between
            # back-to-back runs.
            iters = max(25, min(50, int(64 * 2 ** 20 / size)))
            # Interleaved (one Gloo iteration, one tpu iteration, ...), so that a
            # loaded machine slows both alike, and in alternating order, so that
            # neither always runs right after the other.
            got = {"cpu": [], "tpu": []}
            for i in range(iters):
                for device in (("cpu", "tpu") if i % 2 == 0 else ("tpu", "cpu")):
                    t = tensors[size][device]
                    start = time.perf_counter()
                    dist.all_reduce(t)
                    if device == "tpu":
                        torch.tpu.synchronize()
                    got[device].append(time.perf_counter() - start)
            ratios[size].append(statistics.median(got["tpu"]) / statistics.median(got["cpu"]))
            for d, v in got.items():
                samples[size][d] += v
    rows = []
    for size in sizes:
        c, t = (statistics.median(samples[size][d]) for d in ("cpu", "tpu"))
        fastest = min(samples[size]["tpu"]) / min(samples[size]["cpu"])
        rows.append((size, c, t, statistics.median(ratios[size]), fastest))
    if rank == 0:
        factor = 2 * (world - 1) / world
        print(f"| bytes | gloo cpu ms | gloo GB/s | tpu ms | tpu GB/s | tpu/gloo | per round | tpu/gloo (fastest) |")
        print("|---:|---:|---:|---:|---:|---:|---|---:|")
        for size, c, t, ratio, fastest in rows:
            per_round = " ".join(f"{r:.2f}" for r in ratios[size])
            print(f"| {size} | {c * 1e3:.3f} | {factor * size / c / 1e9:.3f} | {t * 1e3:.3f} | "
                  f"{factor * size / t / 1e9:.3f} | {ratio:.2f} | {per_round} | {fastest:.2f} |",
                  flush=True)
        s = torch_tpu._C._distributed._in_place_stats()
        print(f"\ntpu allreduces Gloo ran on the device buffer itself: {s['in_place']} "
              f"(host-staged instead: {s['declined']})", flush=True)
        big = [ratio for size, _, _, ratio, _ in rows if size >= 4 * 2 ** 20]
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
    p.add_argument("--rounds", type=int, default=5, help="sweeps over the sizes (median ratio)")
    p.add_argument("--skip-ddp", action="store_true", help="skip the minGPT DDP/FSDP2 part")
    p.add_argument("--ddp-steps", type=int, default=12)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    print(f"## all_reduce, {args.nproc} processes (loopback)\n")
    print(torchrun(args.nproc, __file__, "--worker", "--max-mb", str(args.max_mb),
                   "--rounds", str(args.rounds)))
    if args.skip_ddp:
        return
    print("## minGPT training step, DDP and FSDP2 (Defer & Fuse; the first two steps left out)\n")
    print("| example | 1 process ms/step | 2 processes ms/step |")
    print("|---|---:|---:|")
    for name, script in (("DDP", "ddp_mingpt.py"), ("FSDP2 (fully_shard per block)", "fsdp_mingpt.py")):
        cells = []
        for nproc in (1, 2):
            out = torchrun(nproc, os.path.join(ROOT, "examples", "distributed", script),
                           "--steps", str(args.ddp_steps), "--warmup", "2")
            m = re.search(r"([\d.]+) ms/step", out)
            cells.append(m.group(1) if m else "?")
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)
    print("\n(global batch 8: with 2 processes each does half the work)")


if __name__ == "__main__":
    main()

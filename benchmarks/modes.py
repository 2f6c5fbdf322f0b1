"""Strict Eager vs Defer & Fuse on a minGPT-size model (the CPU PJRT plugin by default).

Training step (forward, backward, AdamW) and inference step (forward, no grad);
for each mode: median step time after warm-up, programs compiled after warm-up,
peak device memory. Ratios are taken within this one run.

    python benchmarks/modes.py [--steps 10] [--warmup 3] [--layers 4 --width 256
                                --context 128 --batch 8]
"""
import argparse
import os
import statistics
import sys
import time

import torch

import torch_tpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402


def run(mode, args, train):
    torch_tpu.set_execution_mode(mode)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=65, block_size=args.context, n_layer=args.layers,
                    n_head=args.heads, n_embd=args.width)
    model = GPT(cfg).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 65, (args.batch, args.context), generator=g).to("tpu")
    y = torch.randint(0, 65, (args.batch, args.context), generator=g).to("tpu")
    torch.tpu.synchronize()

    def step():
        if train:
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                _, loss = model(x, y)
        return loss.item()

    first = time.perf_counter()
    step()
    first = time.perf_counter() - first
    for _ in range(args.warmup - 1):
        step()
    torch.tpu.reset_peak_memory_stats()
    compiled = torch_tpu.debug.metrics()["programs_compiled"]
    times, loss = [], None
    for _ in range(args.steps):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    compiles = torch_tpu.debug.metrics()["programs_compiled"] - compiled
    peak = torch.tpu.max_memory_allocated()
    del model, opt
    torch_tpu.set_execution_mode("strict_eager")
    return dict(median=statistics.median(times), first=first, compiles=compiles, peak=peak,
                loss=loss)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    args = p.parse_args()
    print(f"platform {torch.tpu.get_device_name()}; GPT {args.layers}x{args.width}, context "
          f"{args.context}, batch {args.batch}; median of {args.steps} steps after "
          f"{args.warmup} warm-up")
    print(f"{'step':10s} {'mode':15s} {'median ms':>10s} {'first ms':>10s} "
          f"{'compiles':>9s} {'peak MiB':>9s} {'speed-up':>9s}")
    for train in (True, False):
        rows = {m: run(m, args, train) for m in ("strict_eager", "defer_and_fuse")}
        base = rows["strict_eager"]["median"]
        for m, r in rows.items():
            print(f"{'train' if train else 'inference':10s} {m:15s} {1e3 * r['median']:10.1f} "
                  f"{1e3 * r['first']:10.1f} {r['compiles']:9d} {r['peak'] / 2**20:9.1f} "
                  f"{base / r['median']:8.2f}x")


if __name__ == "__main__":
    main()

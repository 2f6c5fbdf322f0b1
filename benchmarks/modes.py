"""Execution modes on a minGPT-size model: torch.compile(backend="tpu") vs Defer & Fuse vs
Strict Eager (the CPU PJRT plugin by default), with PyTorch's own CPU eager and
torch.compile (inductor) on the CPU as the baselines a user would otherwise pick.

Training step (forward, backward, AdamW) and inference step (forward, no grad). The
compiled modes compile the whole step function (Dynamo breaks it at zero_grad and
backward, so it becomes a forward, a backward and an optimizer graph).
For each mode: median step time after warm-up, first-step time (tracing and
compiling, with empty compile caches), programs compiled after warm-up (tpu modes),
peak device memory (tpu modes: the backend's own accounting) and peak process RSS.
Each (mode, step kind) runs in its own interpreter so compile caches, Dynamo state
and RSS peaks do not leak between rows; the timed steps run in rounds (one step of
every mode per round) so that load from elsewhere on the machine falls on all
modes alike. Ratios are taken within this one run.

    python benchmarks/modes.py [--steps 10] [--warmup 3] [--layers 4 --width 256
                                --context 128 --batch 8] [--modes compiled,defer_and_fuse]
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

import gpt_bench  # (this script's directory is on sys.path)
import step_children
from step_children import StepChild

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODES = ("compiled", "defer_and_fuse", "strict_eager", "cpu_eager", "cpu_inductor")


def _rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup(mode, args, train):
    """Builds the model, optimizer and step function of one mode; returns step()."""
    import torch

    import torch_tpu
    sys.path.insert(0, ROOT)
    from examples.mingpt.model import GPT, GPTConfig

    dev = "cpu" if mode.startswith("cpu_") else "tpu"
    if mode in ("defer_and_fuse", "strict_eager"):
        torch_tpu.set_execution_mode(mode)
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=65, block_size=args.context, n_layer=args.layers,
                    n_head=args.heads, n_embd=args.width)
    model = GPT(cfg).to(dev)
    # Compiled on tpu: capturable=True keeps AdamW's step counts on the device so that
    # the optimizer graph is one device program (Dynamo sets it itself only for CUDA/XPU).
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, capturable=mode == "compiled")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 65, (args.batch, args.context), generator=g).to(dev)
    y = torch.randint(0, 65, (args.batch, args.context), generator=g).to(dev)
    if dev == "tpu":
        torch.tpu.synchronize()

    step = gpt_bench.make_step(model, opt, x, y, train)

    if mode == "compiled":
        step = torch.compile(step, backend="tpu")
    elif mode == "cpu_inductor":
        step = torch.compile(step, backend="inductor")
    def timed_step():
        # The step is over when its device work is: the loss can be ready while the
        # optimizer update still runs, and that work must not leak into the next
        # timed step (of this mode or, in rounds, of another).
        value = step().item()
        if dev == "tpu":
            torch.tpu.synchronize()
        return value
    return timed_step


def child(args):
    """Runs one (mode, step kind) as the parent directs over stdin/stdout: "warmup"
    (first step, timed, then the other warm-up steps), "step" (one timed step),
    "done" (the summary). Lines to the parent start with "RESULT "."""
    import torch

    import torch_tpu
    on_tpu = not args.child.startswith("cpu_")

    def reply(obj):
        print("RESULT " + json.dumps(obj), flush=True)

    try:
        rss0 = _rss_mib()
        step = setup(args.child, args, args.train)
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "warmup":
                t = time.perf_counter()
                step()
                first = time.perf_counter() - t
                for _ in range(args.warmup - 1):
                    step()
                if on_tpu:
                    torch.tpu.reset_peak_memory_stats()
                compiled = torch_tpu.debug.metrics()["programs_compiled"]
                reply(dict(first=first))
            elif cmd == "step":
                t = time.perf_counter()
                loss = step()
                reply(dict(time=time.perf_counter() - t, loss=loss))
            elif cmd == "done":
                reply(dict(compiles=torch_tpu.debug.metrics()["programs_compiled"] - compiled
                           if on_tpu else None,
                           peak=torch.tpu.max_memory_allocated() / 2**20 if on_tpu else None,
                           rss=_rss_mib() - rss0))
                return
    except Exception as e:  # a baseline that cannot run here is reported, not fatal
        reply(dict(error=f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"))


def start_child(mode, args, train, cache):
    """One mode in its own interpreter: compile caches (empty, so the first step shows
    what compiling costs), Dynamo state and RSS peaks do not leak between modes."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode,
           "--warmup", str(args.warmup)] + gpt_bench.size_argv(args) + (["--train"] if train else [])
    env = dict(os.environ)
    env["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(dir=cache)
    env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=cache)
    return StepChild(mode, cmd, env)


def measure(modes, args, train, cache):
    """Warm-up (and first-step time) one mode at a time; then the timed steps in
    rounds, one step of each mode per round, so that load from other processes on
    the machine falls on every mode alike."""
    return step_children.measure(modes, lambda m: start_child(m, args, train, cache), args.steps)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    gpt_bench.add_size_args(p)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    import torch
    import torch_tpu  # noqa: F401
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print(f"platform {torch.tpu.get_device_name()}; torch {torch.__version__}; "
          f"GPT {args.layers}x{args.width}, context {args.context}, batch {args.batch}; "
          f"median of {args.steps} steps after {args.warmup} warm-up; {os.cpu_count()} CPUs")
    header = (f"| {'step':9s} | {'mode':15s} | {'median ms':>9s} | {'first ms':>9s} | "
              f"{'compiles':>8s} | {'dev peak MiB':>12s} | {'RSS +MiB':>8s} | "
              f"{'vs CPU eager':>12s} |")
    print(header)
    print("|" + "|".join("-" * (len(c) + 0) for c in header.split("|")[1:-1]) + "|")
    with tempfile.TemporaryDirectory(prefix="torch_tpu_bench_") as cache:
        for train in (True, False):
            rows = measure(modes, args, train, cache)
            base = rows.get("cpu_eager", {}).get("median")
            for m, r in rows.items():
                kind = "train" if train else "inference"
                if "error" in r:
                    print(f"| {kind:9s} | {m:15s} | error: {r['error']} |")
                    continue
                ratio = f"{base / r['median']:11.2f}x" if base else f"{'-':>12s}"
                print(f"| {kind:9s} | {m:15s} | {1e3 * r['median']:9.1f} | "
                      f"{1e3 * r['first']:9.1f} | "
                      f"{'-' if r['compiles'] is None else r['compiles']:>8} | "
                      f"{'-' if r['peak'] is None else format(r['peak'], '.1f'):>12s} | "
                      f"{r['rss']:8.1f} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()

"""What XLA charges to compile the programs of a cold GPT training step, one program at a
time: the lower bound of a cold step on this machine. A script, not a test.

    python benchmarks/compile_cost.py [--mode strict_eager] [--reps 3] [--top 15] [size flags]

1. A fresh process runs one training step (peers.py's GPT, AdamW) in the mode with an
   empty compile cache and TORCH_TPU_DUMP_DIR set: every program it compiles is written
   as StableHLO with the op it serves.
2. This process compiles each of those programs again, one at a time, --reps times
   (the compile cache off: torch_tpu.debug.compile_program), and takes the median:
   XLA's compile time per program with nothing else running and XLA's lazily built
   state already made, so the sum is what the step's compiles cost at best.
3. The same for a one-op program (an `add` of two vectors), whose compile is almost all
   fixed cost: MLIR and LLVM set-up, the HLO pass pipeline, per-program code generation.

The table is per op (programs, compile seconds); the summary line says how much of the
sum is that fixed cost times the number of programs. Compare the sum with the cold step's
"cpu s" in benchmarks/cold_start.py: the rest is the in-step contention and the step's
own work.
"""
import argparse
import collections
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import gpt_bench

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

STEP = r'''
import sys, torch, torch_tpu
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
import argparse, gpt_bench
args = argparse.Namespace(**{size!r})
model, x, y = gpt_bench.tpu_gpt_and_batch(args)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
gpt_bench.make_step(model, opt, x, y, True)().item()
print("PROGRAMS", torch_tpu.debug.metrics()["programs_compiled"])
'''

ONE_OP = """module @main {
  func.func public @main(%a: tensor<1024xf32>, %b: tensor<1024xf32>) -> tensor<1024xf32> {
    %r = stablehlo.add %a, %b : tensor<1024xf32>
    return %r : tensor<1024xf32>
  }
}
"""


def dump_cold_step(mode, dump_dir, size):
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
        env.update(TORCH_TPU_EXECUTION_MODE=mode, TORCH_TPU_CACHE_DIR=cache,
                   TORCH_TPU_DUMP_DIR=dump_dir)
        code = STEP.format(root=ROOT, bench=os.path.dirname(os.path.abspath(__file__)), size=size)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=1800)
        if r.returncode != 0:
            sys.exit(r.stderr[-4000:])
    programs = []
    for meta in sorted(glob.glob(os.path.join(dump_dir, "*.json"))):
        with open(meta) as f:
            what = json.load(f)["what"]
        with open(meta[:-len(".json")] + ".mlir") as f:
            programs.append((what, f.read()))
    return programs


def compile_seconds(torch_tpu, text, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        torch_tpu.debug.compile_program(text, "compile_cost")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", default="strict_eager", choices=["strict_eager", "defer_and_fuse"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=15, help="ops shown, most expensive first")
    gpt_bench.add_size_args(ap)  # the GPT of the other benchmarks, peers.py's by default
    args = ap.parse_args()
    size = {name: getattr(args, name) for name, _ in gpt_bench.SIZE_FLAGS}
    with tempfile.TemporaryDirectory() as dump:
        programs = dump_cold_step(args.mode, dump, size)
    os.environ["TORCH_TPU_CACHE"] = "0"  # every compile below is a real one
    import torch_tpu
    compile_seconds(torch_tpu, ONE_OP, 2)  # XLA's lazily built state, made once
    by_op = collections.defaultdict(list)
    for what, text in programs:
        by_op[what].append(compile_seconds(torch_tpu, text, args.reps))
    fixed = compile_seconds(torch_tpu, ONE_OP, max(args.reps, 5))
    total = sum(sum(v) for v in by_op.values())
    print(f"{args.mode}: {len(programs)} programs, {total:.2f} s to compile them one at a time "
          f"(median of {args.reps} each)")
    print(f"one-op program: {fixed * 1e3:.1f} ms; x {len(programs)} programs = "
          f"{fixed * len(programs):.2f} s ({fixed * len(programs) / total:.0%} of the sum)")
    print(f"{'op':44s} {'programs':>8s} {'s':>7s}")
    rows = sorted(by_op.items(), key=lambda kv: -sum(kv[1]))
    for what, secs in rows[:args.top]:
        print(f"{what:44s} {len(secs):8d} {sum(secs):7.3f}")
    rest = rows[args.top:]
    if rest:
        print(f"{'(the other ' + str(len(rest)) + ' ops)':44s} {sum(len(s) for _, s in rest):8d} "
              f"{sum(sum(s) for _, s in rest):7.3f}")


if __name__ == "__main__":
    main()

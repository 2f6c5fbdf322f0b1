"""Time to the end of the first and the third GPT training step in a fresh process
with an empty compile cache, per execution mode, with Strict Eager's pipelined
compilation on and off (TORCH_TPU_PIPELINED_COMPILE), side by side.

    python benchmarks/cold_start.py [--rounds 3] [--configs strict,strict_serial,defer_and_fuse]
                                    [--warm]

Configs: strict (Strict Eager, pipelined compilation: TORCH_TPU_PIPELINED_COMPILE=1, the
default where the process has 4 CPUs or more), strict_serial (Strict Eager compiling each
op's program at its call: TORCH_TPU_PIPELINED_COMPILE=0, the default below 4 CPUs),
defer_and_fuse. Each run is a new interpreter with a new empty cache directory; the
rounds interleave the configs (one run of each per round) so that load from elsewhere
falls on all alike; the figures are medians over the rounds. --warm adds a second run
per config on the cache the first one filled. The model, batch and step are
peers.py's (GPT 4 layers x 256, 4 heads, context 128, batch 8, AdamW, examples/mingpt).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CONFIGS = {
    "strict": dict(TORCH_TPU_EXECUTION_MODE="strict_eager", TORCH_TPU_PIPELINED_COMPILE="1"),
    "strict_serial": dict(TORCH_TPU_EXECUTION_MODE="strict_eager", TORCH_TPU_PIPELINED_COMPILE="0"),
    "defer_and_fuse": dict(TORCH_TPU_EXECUTION_MODE="defer_and_fuse"),
}


def child(args):
    import torch
    import torch_tpu
    sys.path.insert(0, ROOT)
    import gpt_bench
    t_import = time.perf_counter() - T0
    model, x, y = gpt_bench.tpu_gpt_and_batch(args)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    step = gpt_bench.make_step(model, opt, x, y, True)
    ends, losses, t = [], [], time.perf_counter()
    compiles_after_first = None
    for i in range(3):
        losses.append(step().item())
        torch.tpu.synchronize()
        ends.append(time.perf_counter() - t)
        if i == 0:
            compiles_after_first = torch_tpu.debug.metrics()["programs_compiled"]
    m = torch_tpu.debug.metrics()
    print("RESULT " + json.dumps(dict(
        import_s=t_import, first_s=ends[0], third_s=ends[2], losses=losses,
        compiles_first=compiles_after_first, compiles=m["programs_compiled"],
        compile_s=m["compile_seconds"], disk_hits=torch_tpu.cache.stats()["disk_hits"],
        pipelined=torch_tpu._C._deferred_stats()["graphs_pipelined"])))


def run(config, cache_dir, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_TPU_")}
    env.update(CONFIGS[config], TORCH_TPU_CACHE_DIR=cache_dir)
    import gpt_bench
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + gpt_bench.size_argv(args)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{config} run failed:\n{r.stderr[-4000:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_bench
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    ap.add_argument("--warm", action="store_true", help="also a run on each filled cache")
    ap.add_argument("--out", help="write every run as JSON here")
    gpt_bench.add_size_args(ap)
    args = ap.parse_args()
    if args.child:
        return child(args)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown config(s) {', '.join(bad)}")
    runs = {c: [] for c in configs}
    warm = {c: [] for c in configs}
    for _ in range(args.rounds):
        for c in configs:
            with tempfile.TemporaryDirectory(prefix="torch_tpu_cold_") as tmp:
                runs[c].append(run(c, tmp, args))
                if args.warm:
                    warm[c].append(run(c, tmp, args))
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    print(f"GPT {args.layers} layers x {args.width}, context {args.context}, batch {args.batch}, "
          f"AdamW; fresh process, empty compile cache; median of {args.rounds} interleaved "
          f"rounds; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'config':<16} {'cache':<6} {'1st step s':>10} {'3rd end s':>9} {'compiles':>8} "
          f"{'compile s':>9} {'pipelined':>9} {'loss 3':>9}")
    base = runs.get("strict_serial")
    for c in configs:
        for kind, rs in (("empty", runs[c]), ("warm", warm[c])):
            if not rs:
                continue
            print(f"{c:<16} {kind:<6} {med(rs, 'first_s'):>10.2f} {med(rs, 'third_s'):>9.2f} "
                  f"{med(rs, 'compiles'):>8.0f} {med(rs, 'compile_s'):>9.2f} "
                  f"{med(rs, 'pipelined'):>9.0f} {rs[0]['losses'][2]:>9.5f}")
    if base and "strict" in runs:
        print(f"Strict Eager, empty cache: pipelined compilation {med(base, 'first_s') / med(runs['strict'], 'first_s'):.2f}x "
              f"faster to the end of the first step, {med(base, 'third_s') / med(runs['strict'], 'third_s'):.2f}x "
              "to the end of the third (each round's pair: "
              + ", ".join(f"{b['first_s'] / a['first_s']:.2f}x" for a, b in zip(runs["strict"], base)) + ")")
    losses = {c: [r["losses"] for r in runs[c]] for c in configs}
    if "strict" in losses and "strict_serial" in losses:
        same = all(a == b for a in losses["strict"] for b in losses["strict_serial"])
        print("Strict Eager losses with and without the pipeline bit-identical:", same)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(runs=runs, warm=warm), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

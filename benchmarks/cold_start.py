"""Time to the end of the first and the third GPT training (or inference) step in a
fresh process with an empty compile cache, per execution mode, with Strict Eager's
pipelined compilation on and off (TORCH_TPU_PIPELINED_COMPILE), side by side.

    python benchmarks/cold_start.py [--rounds 3] [--configs strict,strict_serial,defer_and_fuse]
                                    [--warm] [--against DIR] [--google-rows] [--infer]

Configs: strict (Strict Eager, pipelined compilation: TORCH_TPU_PIPELINED_COMPILE=1, the
default where the process has 2 CPUs or more), strict_serial (Strict Eager compiling each
op's program at its call: TORCH_TPU_PIPELINED_COMPILE=0, the default on 1 CPU),
defer_and_fuse. Each run is a new interpreter with a new empty cache directory; the
rounds interleave the configs (one run of each per round) so that load from elsewhere
falls on all alike; the figures are medians over the rounds. --warm adds a second run
per config on the cache the first one filled. --against DIR adds, for each config, a
run of another build of torch_tpu (DIR holds its `torch_tpu` package with its built
extension, e.g. a copy of the current head's), in the same rounds. --google-rows adds
Google's TorchTPU 0.2.0 (DEFER_NEVER and DEFER_AND_FUSE, from .peers/google_tpu, made
by `peers.py --setup google_tpu`) on the same CPU plugin, timed the same way: the
loss's `.item()`, then the accelerator's synchronize. The model, batch and step are
peers.py's (GPT 4 layers x 256, 4 heads, context 128, batch 8, AdamW, examples/mingpt);
--infer times the inference step instead (the model in eval mode, a no-grad forward to
the loss), as peers.py's inference rows.
"cpu s" is the process's CPU time to the end of the first step: what a loaded
machine's wall time scales with.
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
GOOGLE = ("google_defer_never", "google_defer_and_fuse")


def child(args):
    import torch
    if args.google:  # Google's torch_tpu, imported before ROOT (ours) is on sys.path
        import peers
        peers.google_device(args.google)
        import torch_tpu
        wait = torch.accelerator.synchronize
    else:
        import torch_tpu
        wait = torch.tpu.synchronize
    sys.path.insert(0, ROOT)
    import gpt_bench
    t_import = time.perf_counter() - T0
    model, x, y = gpt_bench.tpu_gpt_and_batch(args)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    if args.infer:
        model.eval()  # as peers.py's inference rows: no dropout
    step = gpt_bench.make_step(model, opt, x, y, not args.infer)
    ends, losses, t, c = [], [], time.perf_counter(), time.process_time()
    compiles_after_first = None
    for i in range(3):
        losses.append(step().item())
        wait()
        ends.append(time.perf_counter() - t)
        if i == 0:
            first_cpu = time.process_time() - c
            if not args.google:
                compiles_after_first = torch_tpu.debug.metrics()["programs_compiled"]
    out = dict(import_s=t_import, first_s=ends[0], third_s=ends[2], first_cpu_s=first_cpu,
               losses=losses, compiles_first=compiles_after_first, torch_tpu=torch_tpu.__file__)
    if not args.google:
        m = torch_tpu.debug.metrics()
        out.update(compiles=m["programs_compiled"], compile_s=m["compile_seconds"],
                   disk_hits=torch_tpu.cache.stats()["disk_hits"],
                   pipelined=torch_tpu._C._deferred_stats()["graphs_pipelined"])
    print("RESULT " + json.dumps(out), flush=True)


def run(config, cache_dir, args, against=None):
    """One fresh process of `config` (ours, or `against`'s build of ours, or Google's)."""
    import gpt_bench
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TORCH_TPU_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + gpt_bench.size_argv(args)
    if args.infer:
        cmd.append("--infer")
    if config in GOOGLE:
        import peers
        env = {k: v for k, v in env.items() if not k.startswith("TPU_")}
        env.update(TPU_LIBRARY_PATH=peers.cpu_plugin_path(), PJRT_DEVICE="CPU")
        cmd[0] = peers.python_of(config)
        if not os.path.exists(cmd[0]):
            sys.exit(f"no {cmd[0]}: run python benchmarks/peers.py --setup google_tpu")
        cmd += ["--google", config]
    else:
        env.update(CONFIGS[config], TORCH_TPU_CACHE_DIR=cache_dir)
        if against:
            env["PYTHONPATH"] = os.path.abspath(against)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, cwd=cache_dir)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        sys.exit(f"{config} run failed:\n{r.stderr[-4000:]}")
    out = json.loads(lines[-1][len("RESULT "):])
    if config in GOOGLE:
        import peers
        log = os.path.join(cache_dir, "stderr.log")
        with open(log, "w") as f:
            f.write(r.stderr)
        out["compiles"] = peers.google_compiles(log)
    elif against:
        assert out["torch_tpu"].startswith(os.path.abspath(against)), out["torch_tpu"]
    return out


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_bench
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--google", help=argparse.SUPPRESS)  # (child) Google's mode
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    ap.add_argument("--warm", action="store_true", help="also a run on each filled cache")
    ap.add_argument("--against", metavar="DIR", help="also each config with DIR's torch_tpu")
    ap.add_argument("--google-rows", dest="google_rows", action="store_true",
                    help="also Google's TorchTPU DEFER_NEVER and DEFER_AND_FUSE")
    ap.add_argument("--infer", action="store_true",
                    help="time the no-grad forward (inference step) instead of the training step")
    ap.add_argument("--out", help="write every run as JSON here")
    gpt_bench.add_size_args(ap)
    args = ap.parse_args()
    if args.child:
        return child(args)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown config(s) {', '.join(bad)}")
    # (row label, config, other build or None), run once each per round, interleaved.
    rows = [(c, c, None) for c in configs]
    if args.against:
        rows += [(c + "@against", c, args.against) for c in configs]
        rows.sort(key=lambda r: configs.index(r[1]))
    if args.google_rows:
        rows += [(g, g, None) for g in GOOGLE]
    runs = {label: [] for label, _, _ in rows}
    warm = {label: [] for label, _, _ in rows}
    loads = []
    for _ in range(args.rounds):
        for label, c, other in rows:
            with tempfile.TemporaryDirectory(prefix="torch_tpu_cold_") as tmp:
                loads.append(os.getloadavg()[0])
                runs[label].append(run(c, tmp, args, other))
                if args.warm and c not in GOOGLE:
                    warm[label].append(run(c, tmp, args, other))
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    print(f"GPT {args.layers} layers x {args.width}, context {args.context}, batch {args.batch}, "
          f"{'inference (no-grad forward)' if args.infer else 'AdamW training'} step; "
          f"fresh process, empty compile cache; median of {args.rounds} interleaved "
          f"rounds; {os.cpu_count()} CPUs, load average {min(loads):.1f}-{max(loads):.1f} "
          f"during the runs" + (f"; @against: {args.against}" if args.against else ""))
    print(f"{'row':<24} {'cache':<6} {'1st step s':>10} {'cpu s':>6} {'3rd end s':>9} "
          f"{'compiles':>8} {'loss 3':>9}")
    for label, c, _ in rows:
        for kind, rs in (("empty", runs[label]), ("warm", warm[label])):
            if not rs:
                continue
            comp = [r.get("compiles") for r in rs]
            comp = "-" if None in comp else f"{statistics.median(comp):.0f}"
            print(f"{label:<24} {kind:<6} {med(rs, 'first_s'):>10.2f} {med(rs, 'first_cpu_s'):>6.2f} "
                  f"{med(rs, 'third_s'):>9.2f} {comp:>8} {rs[0]['losses'][2]:>9.5f}")
    for c in configs:
        if args.against:
            a, b = runs[c], runs[c + "@against"]
            print(f"{c}: first step {med(b, 'first_s') / med(a, 'first_s'):.2f}x faster than "
                  f"@against (each round: "
                  + ", ".join(f"{y['first_s'] / x['first_s']:.2f}x" for x, y in zip(a, b))
                  + f"), end of 3rd step {med(b, 'third_s') / med(a, 'third_s'):.2f}x, "
                  f"CPU to the first step's end {med(b, 'first_cpu_s') / med(a, 'first_cpu_s'):.2f}x less")
    losses = {label: [r["losses"] for r in runs[label]] for label in runs}
    strict = [label for label, c, _ in rows if c.startswith("strict")]
    if strict:
        same = all(ls == losses[strict[0]][0] for a in strict for ls in losses[a])
        print("Strict Eager losses bit-identical across rows and rounds:", same)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(runs=runs, warm=warm, loads=loads), f, indent=1)


if __name__ == "__main__":
    sys.exit(main())

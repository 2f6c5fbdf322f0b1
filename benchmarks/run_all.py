"""Every benchmark in one command: the six models (minGPT, a ResNet-18-style CNN, DLRM
and a DDPM UNet from examples/; Llama and Qwen through Hugging Face's
LlamaForCausalLM / Qwen3ForCausalLM from small configs with random weights), each as
a training step and an inference step (and, for Llama and Qwen, a decode step: greedy
generate() of a fixed number of tokens), in Strict Eager, Defer & Fuse and compiled mode
(torch.compile(backend="tpu")) on the `tpu` device, beside PyTorch's CPU eager and
torch.compile (inductor) on the CPU; each in float32 and under bfloat16 autocast.
Writes a markdown table to stdout, a JSON file and a PNG chart of the speed relative
to PyTorch CPU eager.

Per row: median step time over the timed steps after warm-up, its ratio to PyTorch
CPU eager in float32 (CPU eager time / row time: above 1 is faster), throughput
(tokens, images or examples per second), first-step time (tracing and compiling),
programs compiled, peak device memory (the backend's accounting; tpu rows), achieved
FLOP/s (matmul/conv/attention FLOPs counted by PyTorch's FlopCounterMode) and their
share of this machine's measured float32 matmul peak (on the same device as the row).
A row that cannot run (a mode or precision the backend lacks) says why instead.

    python benchmarks/run_all.py                  # full: each row in a fresh process,
                                                  #   empty compile caches (cold first step)
    python benchmarks/run_all.py --quick          # small models, 3 timed steps, all tpu rows
                                                  #   in one process (the on-disk compile cache
                                                  #   kept), CPU rows in another; every model in
                                                  #   every tpu mode and CPU eager; inductor
                                                  #   skipped; bf16 for Defer & Fuse training
    python benchmarks/run_all.py --json out.json --models mingpt --modes compiled,cpu_eager
    python benchmarks/run_all.py --kinds train --precisions fp32,bf16   # training only
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from tqdm import tqdm  # noqa: E402

from measure import MODES, TPU_MODES  # noqa: E402
from workloads import KINDS, MODELS, describe, kinds  # noqa: E402

PRECISIONS = ("fp32", "bf16")

PRESETS = {  # suite size -> timed steps, warm-up steps, matmul size for the peak
    "full": dict(steps=10, warmup=3, matmul=2048, isolate="row"),
    "quick": dict(steps=3, warmup=2, matmul=512, isolate="suite"),
    "smoke": dict(steps=2, warmup=2, matmul=128, isolate="suite"),
}


# ---- child side -------------------------------------------------------------------

def child(spec):
    """Runs the jobs in `spec` in this process, one RESULT line per job."""
    from flops import count_step_flops, matmul_peak
    from measure import measure
    if spec.get("cpu_threads"):
        import torch
        torch.set_num_threads(spec["cpu_threads"])
    for job in spec["jobs"]:
        if job["what"] == "calibrate":  # the device's matmul peak; on cpu, also the FLOP counts
            out = dict(peak_flops={job["device"]: matmul_peak(job["device"], spec["matmul"])})
            if job["device"] == "cpu":  # the steps no CPU eager float32 row counts
                out["flops"] = {f"{m}/{k}": _flops(count_step_flops, m, k, spec["size"])
                                for m in spec["models"] for k in kinds(m, spec["kinds"])
                                if f"{m}/{k}" not in spec["flops_in_rows"]}
        else:
            out = measure(job["model"], job["kind"], job["mode"], spec["size"], spec["steps"],
                          spec["warmup"], job["precision"], count_flops=counts_flops(job))
        print("RESULT " + json.dumps(dict(job=job, result=out)), flush=True)


def counts_flops(job):
    """Whether the row counts its step's FLOPs in a warm-up step (measure(count_flops)):
    the CPU eager float32 rows, which run that step anyway. Counting in a job of its
    own built every model a second time for one step: 3-7 s of the CPU process's
    time per language model or UNet training step on a small CPU."""
    return job["what"] == "row" and job["mode"] == "cpu_eager" and job["precision"] == "fp32"


def _flops(count, model, kind, size):
    try:
        return count(model, kind, size)
    except Exception:  # the row is still worth measuring without its FLOP count
        return None


# ---- parent side ------------------------------------------------------------------

def spawn(spec, cache_root, fresh_caches, timeout, on_result):
    """Runs `spec` in a child interpreter; calls on_result(job, result) per job. Jobs the
    child never reported (a crash, a timeout) get an error naming the reason."""
    env = dict(os.environ)
    if fresh_caches:  # empty compile caches: the first step shows what compiling costs
        env["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(dir=cache_root)
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(dir=cache_root)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    done = set()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        try:
            for line in proc.stdout:  # results stream in as rows finish
                if line.startswith("RESULT "):
                    r = json.loads(line[7:])
                    done.add(json.dumps(r["job"], sort_keys=True))
                    on_result(r["job"], r["result"])
                if time.monotonic() > deadline:
                    proc.kill()
                    break
            proc.wait(timeout=max(1, deadline - time.monotonic()))
            reason = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            reason = f"timed out after {timeout} s"
        if time.monotonic() > deadline:
            reason = f"timed out after {timeout} s"
        err.seek(0)
        tail = [ln for ln in err.read().strip().splitlines() if ln.strip()]
    for job in spec["jobs"]:
        if json.dumps(job, sort_keys=True) not in done:
            last = tail[-1][:200] if tail else "no output"
            on_result(job, dict(error=f"{reason}: {last}"))


def plan(args):
    """(the calibration jobs, the row jobs, jobs skipped with a reason). --quick and
    --smoke keep every model in every mode, float32, and reduce the rest: inductor is
    skipped (named in the table) and bf16 is measured for Defer & Fuse training only;
    --quick also compiles only the training step (Dynamo's tracing of the inference and
    decode steps, 5-40 s each on a small CPU, is most of what the compiled rows cost),
    unless --inductor / --all-bf16 / --all-compiled ask for them."""
    rows, skipped = [], {}
    for model in args.models:
        for kind in kinds(model, args.kinds):
            for mode in args.modes:
                for precision in args.precisions:
                    job = dict(what="row", model=model, kind=kind, mode=mode, precision=precision)
                    if mode == "cpu_inductor" and args.size != "full" and not args.inductor:
                        skipped[json.dumps(job, sort_keys=True)] = (
                            f"skipped by --{args.size}: inductor's C++ compile takes minutes "
                            f"on a small CPU; run the full suite or add --inductor")
                    elif (mode == "compiled" and kind != "train" and args.size == "quick"
                          and not args.all_compiled):
                        skipped[json.dumps(job, sort_keys=True)] = (
                            "skipped by --quick: compiled rows measure the training step; "
                            "run the full suite or add --all-compiled")
                    elif (precision == "bf16" and args.size != "full" and not args.all_bf16
                          and (mode, kind) != ("defer_and_fuse", "train")):
                        continue  # --quick/--smoke: bf16 for the default mode's training step
                    else:
                        rows.append(job)
    devices = ("tpu",) * any(j["mode"] in TPU_MODES for j in rows) + ("cpu",)
    cal = {d: dict(what="calibrate", device=d) for d in devices}
    return cal, rows, skipped


LOAD_AT_START = os.getloadavg()


def cpu_threads(asked):
    """The thread count for PyTorch's CPU kernels: `asked`, or None (PyTorch's default,
    one per core) on a quiet machine, or 1 when more threads are runnable than there are
    cores (the 1-minute load average above the CPU count). Then PyTorch's parallel
    kernels wait at every OpenMP barrier for a thread the OS has descheduled: measured
    on a 2-core machine at load 19, a minGPT training step took 2.2 s with 2 threads
    and 0.05 s with 1. The JSON records the choice and the load."""
    if asked:
        return asked
    return 1 if LOAD_AT_START[0] > (os.cpu_count() or 1) else None


def key(job):
    return (job["model"], job["kind"], job["mode"], job["precision"])


def fmt(v, spec, missing="-"):
    return missing if v is None else format(v, spec)


def table(results, cal, size):
    """The markdown table of all rows."""
    lines = ["| model | step | mode | precision | median ms | x CPU eager | throughput | "
             "first ms | compiles | peak MiB | GFLOP/s | % of peak |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, kind, mode, precision), r in results.items():
        head = f"| {model} | {kind} | {mode} | {precision} |"
        if "error" in r:
            lines.append(f"{head} n/a ({r['error']}) | | | | | | | |")
            continue
        lines.append(
            f"{head} {1e3 * r['median_s']:.2f} | {fmt(r.get('x_cpu_eager'), '.2f')} | "
            f"{r['throughput']:,.0f} {r['throughput_unit']} | "
            f"{1e3 * r['first_s']:.1f} | {fmt(r.get('compiles'), 'd')} | "
            f"{fmt(r.get('peak_mib'), '.1f')} | {fmt(r.get('gflops'), '.2f')} | "
            f"{fmt(r.get('pct_of_peak'), '.1f')} |")
    return "\n".join(lines)


def derive(results, cal):
    """Adds the ratio to CPU eager and the FLOP/s figures to each measured row."""
    counted = {f"{m}/{k}": r["flops_per_step"] for (m, k, _, _), r in results.items()
               if r.get("flops_per_step")}  # by the CPU eager float32 rows
    cal.setdefault("flops", {}).update(counted)
    for (model, kind, mode, precision), r in results.items():
        if "error" in r:
            continue
        base = results.get((model, kind, "cpu_eager", "fp32"), {}).get("median_s")
        r["x_cpu_eager"] = base / r["median_s"] if base else None
        flops = cal.get("flops", {}).get(f"{model}/{kind}")
        peak = cal.get("peak_flops", {}).get("tpu" if mode in TPU_MODES else "cpu")
        if flops:
            r["flops_per_step"] = flops
            r["gflops"] = flops / r["median_s"] / 1e9
            r["pct_of_peak"] = 100 * flops / r["median_s"] / peak if peak else None


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small models, fewer steps: under three minutes")
    size.add_argument("--smoke", action="store_true", help="tiny models, 2 steps (tests)")
    p.add_argument("--json", default="run_all.json", help="where to write the results")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--precisions", default=",".join(PRECISIONS),
                   help="fp32 and/or bf16 (torch.autocast(bfloat16) around the forward)")
    p.add_argument("--all-bf16", action="store_true",
                   help="with --quick/--smoke, bf16 rows for every mode (default: Defer & Fuse "
                        "and CPU eager only)")
    p.add_argument("--all-compiled", action="store_true",
                   help="with --quick, compiled rows for every step (default: training only)")
    p.add_argument("--png", help="where to write the chart (default: the JSON path with .png)")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="steps to measure: train, infer, decode (decode: Llama and Qwen only)")
    p.add_argument("--steps", type=int, help="timed steps (default 10; 2 with --smoke)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 3 full, 2 quick)")
    p.add_argument("--isolate", choices=("row", "suite"),
                   help="a fresh process (and empty compile caches) per row, or one process "
                        "for the tpu rows and one for the CPU rows (default: row for the full suite, suite otherwise)")
    p.add_argument("--inductor", action="store_true",
                   help="also run cpu_inductor with --quick/--smoke")
    p.add_argument("--cpu-threads", type=int,
                   help="torch.set_num_threads in the benchmark processes (default: PyTorch's "
                        "own choice, or 1 when the machine is oversubscribed: see cpu_threads())")
    p.add_argument("--timeout", type=int, default=1200, help="seconds per child process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(json.loads(args.child))

    args.size = "quick" if args.quick else "smoke" if args.smoke else "full"
    preset = PRESETS[args.size]
    args.models = [m for m in args.models.split(",") if m]
    args.modes = [m for m in args.modes.split(",") if m]
    args.kinds = [k for k in args.kinds.split(",") if k]
    for k in args.kinds:
        if k not in KINDS:
            p.error(f"unknown step {k!r}: choose from {', '.join(KINDS)}")
    for m in args.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}: choose from {', '.join(MODES)}")
    args.precisions = [x for x in args.precisions.split(",") if x]
    for x in args.precisions:
        if x not in PRECISIONS:
            p.error(f"unknown precision {x!r}: choose from {', '.join(PRECISIONS)}")
    for m in args.models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}: choose from {', '.join(MODELS)}")
    isolate = args.isolate or preset["isolate"]
    args.cpu_threads = cpu_threads(args.cpu_threads)
    spec = dict(size=args.size, steps=args.steps or preset["steps"],
                warmup=max(1, args.warmup or preset["warmup"]), matmul=preset["matmul"],
                models=args.models, kinds=args.kinds, cpu_threads=args.cpu_threads)
    cal_jobs, rows, skipped = plan(args)
    spec["flops_in_rows"] = sorted({f"{j['model']}/{j['kind']}" for j in rows if counts_flops(j)})
    print(f"torch_tpu benchmark suite ({args.size}): {', '.join(describe(m, args.size) for m in args.models)}; "
          f"median of {spec['steps']} steps after {spec['warmup']} warm-up; "
          f"{'a fresh process and empty compile caches per row' if isolate == 'row' else 'one process for tpu rows, one for CPU rows, on-disk compile caches kept'}; "
          f"{os.cpu_count()} CPUs at load {LOAD_AT_START[0]:.1f}, "
          f"{args.cpu_threads or 'default'} PyTorch CPU threads", flush=True)

    results, cal = {}, {}
    bar = tqdm(range(len(cal_jobs) + len(rows)), desc="benchmarks", dynamic_ncols=True)
    it = iter(bar)
    next(it)

    last = [time.perf_counter()]

    def on_result(job, result):
        now = time.perf_counter()
        result["wall_s"] = now - last[0]  # this row's share of the suite's wall time
        last[0] = now
        if job["what"] == "calibrate":
            if "error" in result:
                cal["error"] = f"{job['device']}: {result['error']}"
            cal.setdefault("peak_flops", {}).update(result.get("peak_flops", {}))
            cal.setdefault("flops", {}).update(result.get("flops", {}))
        else:
            results[key(job)] = result
            bar.set_postfix_str(" ".join(key(job)))
        next(it, None)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torch_tpu_bench_") as cache:
        if isolate == "row":
            spawn(dict(spec, jobs=list(cal_jobs.values())), cache, True, args.timeout, on_result)
            for job in rows:
                spawn(dict(spec, jobs=[job]), cache, True, args.timeout, on_result)
        else:
            # Two processes, not one: the PJRT CPU client's worker threads, once
            # started, take cores from PyTorch's own CPU kernels in the same process.
            # Each calibrates its own device first (the CPU one also counts FLOPs).
            tpu_rows = [j for j in rows if j["mode"] in TPU_MODES]
            cpu_rows = [j for j in rows if j["mode"] not in TPU_MODES]
            if tpu_rows:
                spawn(dict(spec, jobs=[cal_jobs["tpu"]] + tpu_rows), cache, False, args.timeout,
                      on_result)
            spawn(dict(spec, jobs=[cal_jobs["cpu"]] + cpu_rows), cache, False, args.timeout,
                  on_result)
    for job_key, reason in skipped.items():
        results[key(json.loads(job_key))] = dict(error=reason)
    order = {k: i for i, k in enumerate(
        (m, k, mode, x) for m in args.models for k in kinds(m, args.kinds) for mode in args.modes
        for x in args.precisions)}
    results = dict(sorted(results.items(), key=lambda kv: order[kv[0]]))
    derive(results, cal)
    elapsed = time.perf_counter() - start

    import torch
    peaks = cal.get("peak_flops", {})
    print(f"\nmatmul peak ({spec['matmul']}^3 float32): "
          + ", ".join(f"{d} {v / 1e9:.1f} GFLOP/s" for d, v in peaks.items())
          + f"; suite took {elapsed:.0f} s\n")
    print(table(results, cal, args.size))
    out = dict(suite=args.size, isolate=isolate, cpu_threads=args.cpu_threads or "default",
               load_average=LOAD_AT_START, seconds=elapsed, steps=spec["steps"],
               warmup=spec["warmup"], cpus=os.cpu_count(), machine=platform.machine(),
               python=platform.python_version(), torch=torch.__version__,
               tpu_platform=_platform_name(),
               workloads={m: describe(m, args.size) for m in args.models},
               matmul_peak_flops=peaks, flops_per_step=cal.get("flops", {}),
               calibration_error=cal.get("error"),
               rows=[dict(model=m, step=k, mode=mode, precision=x, **r)
                     for (m, k, mode, x), r in results.items()])
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    png = args.png or os.path.splitext(args.json)[0] + ".png"
    chart(results, png, f"torch_tpu benchmarks ({args.size}, {_platform_name()})")
    print(f"\nwrote {args.json} and {png}")


def chart(results, path, title):
    """A horizontal bar per measured row: its speed relative to PyTorch CPU eager
    (float32), on a log axis with 1 marked; rows grouped by model and step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"strict_eager": "C0", "defer_and_fuse": "C1", "compiled": "C2",
               "cpu_eager": "0.55", "cpu_inductor": "C4"}
    bars = [(k, r["x_cpu_eager"]) for k, r in results.items()
            if "error" not in r and r.get("x_cpu_eager")]
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(bars) + 1.5))
    labels = [f"{m} {k} {mode} {x}" for (m, k, mode, x), _ in bars]
    ax.barh(range(len(bars)), [v for _, v in bars],
            color=[colours.get(k[2], "C7") for k, _ in bars],
            hatch=None, edgecolor=["black" if k[3] == "bf16" else "none" for k, _ in bars])
    ax.set_yticks(range(len(bars)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed relative to PyTorch CPU eager, float32 (higher is faster; "
                  "outlined bars: bf16 autocast)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _platform_name():
    try:
        import torch
        return torch.tpu.get_device_name()
    except Exception as e:  # the table is still worth writing without the name
        return f"unknown ({type(e).__name__})"


if __name__ == "__main__":
    main()

"""Merges the JSON files of several `run_all.py` runs (the full suite run in chunks, a
model or a set of modes at a time, so that a chunk that finishes is kept when a later
one does not) into one markdown table, one JSON and one PNG chart.

    python benchmarks/merge_runs.py --json docs/benchmarks/full.json \\
        full_mingpt.json full_resnet_core.json full_resnet_inductor.json ...

A row measured in more than one file (CPU eager, run again beside the inductor rows)
is taken from the first file that measured it; every row's ratio to CPU eager is then
recomputed against the CPU eager float32 row the table shows. FLOP/s and the share of
the matmul peak stay as each chunk computed them (against the peak it measured).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import MODES  # noqa: E402
from run_all import PRECISIONS, chart, table  # noqa: E402
from workloads import KINDS, MODELS, kinds  # noqa: E402


def merge(runs, missing=None):
    """Rows by (model, step, mode, precision). With `missing` (a reason), every row of
    the full suite's plan for the runs' models that no run measured is a row too, saying
    so: a chunk that did not finish leaves named gaps, not a shorter table."""
    rows = {}
    for run in runs:
        for r in run["rows"]:
            k = (r["model"], r["step"], r["mode"], r["precision"])
            if k not in rows or ("error" in rows[k] and "error" not in r):
                rows[k] = {f: v for f, v in r.items()
                           if f not in ("model", "step", "mode", "precision")}
    if missing:
        for model in {m for (m, _, _, _) in rows}:
            for kind in kinds(model):
                for mode in MODES:
                    for precision in PRECISIONS:
                        rows.setdefault((model, kind, mode, precision), dict(error=missing))
    for (model, kind, mode, precision), r in rows.items():
        if "error" in r:
            continue
        base = rows.get((model, kind, "cpu_eager", "fp32"), {}).get("median_s")
        r["x_cpu_eager"] = base / r["median_s"] if base else None
    order = {k: i for i, k in enumerate((m, k, mode, x) for m in MODELS for k in KINDS
                                        for mode in MODES for x in PRECISIONS)}
    return dict(sorted(rows.items(), key=lambda kv: order.get(kv[0], len(order))))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run_all.py JSON files, in order of preference")
    p.add_argument("--json", required=True, help="the merged JSON (the chart beside it, .png)")
    p.add_argument("--missing", help="the reason shown for planned rows no run measured "
                                     "(default: such rows are left out)")
    args = p.parse_args()
    runs = []
    for path in args.runs:
        with open(path) as f:
            runs.append(dict(json.load(f), file=os.path.basename(path)))
    rows = merge(runs, args.missing)
    chunks = [{k: run.get(k) for k in ("file", "suite", "isolate", "cpu_threads", "load_average",
                                        "seconds", "steps", "warmup", "matmul_peak_flops")}
              for run in runs]
    workloads = {}
    for run in runs:
        workloads.update(run.get("workloads", {}))
    first = runs[0]
    out = dict(suite="full (merged chunks)", chunks=chunks, workloads=workloads,
               seconds=sum(run.get("seconds", 0) for run in runs),
               **{k: first.get(k) for k in ("cpus", "machine", "python", "torch", "tpu_platform")},
               rows=[dict(model=m, step=k, mode=mode, precision=x, **r)
                     for (m, k, mode, x), r in rows.items()])
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    png = os.path.splitext(args.json)[0] + ".png"
    chart(rows, png, f"torch_tpu benchmarks (full, {first.get('tpu_platform')})")
    print(table(rows, None, "full"))
    print(f"\nwrote {args.json} and {png}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Dynamic shapes: buckets vs one program per size, in torch.compile(backend="tpu") and
in Defer & Fuse.

Three workloads over random sizes, each run these ways:
  per-size      torch.compile(..., dynamic=True, options={"dynamic_buckets": False})
  buckets       torch.compile(..., dynamic=True)   (powers of two, padded and masked)
  dnf-per-size  Defer & Fuse, TORCH_TPU_DEFER_BUCKETS=0 (one fused program per size)
  dnf-buckets   Defer & Fuse with its buckets (the default; dynamo/deferred_buckets.py)
  cpu           PyTorch eager on the CPU
Workloads: (1) a BERT-style encoder classifier (Transformers BertConfig, random
weights) over batches of random lengths 1-512; (2) a GPT-2-style decoder prefill
(last-token logits) over random prompt lengths 1-256; (3) an MLP over random batch
sizes 1-512. For each: programs compiled, total wall time over all batches
(compiles included), steady-state time per batch (the first --steady batches run
again once everything is compiled), and the largest difference from the CPU.

    python benchmarks/dynamic_shapes.py                     # 200 batches each
    python benchmarks/dynamic_shapes.py --batches 40 --workloads encoder
    python benchmarks/dynamic_shapes.py --workloads encoder --out enc.jsonl  # resumable
    python benchmarks/dynamic_shapes.py --batches 40 --workloads encoder --ways dnf-per-size,dnf-buckets,cpu

Compiles are real: each workload and way runs in its own process with empty program
caches (fresh temporary directories). Rows go to a JSON-lines file (--out); a run into the
same file skips the rows already there. One progress line a batch goes to stderr.
"""
import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import torch_tpu


def encoder(cfg):
    from transformers import BertConfig, BertForSequenceClassification
    config = BertConfig(vocab_size=1000, hidden_size=cfg.hidden, num_hidden_layers=cfg.layers,
                        num_attention_heads=4, intermediate_size=4 * cfg.hidden,
                        max_position_embeddings=512, num_labels=3)
    model = BertForSequenceClassification(config).eval()

    def inputs(rng):
        n = rng.randint(1, 512)
        ids = torch.randint(0, 1000, (cfg.batch, n))
        keep = torch.ones(cfg.batch, n, dtype=torch.long)
        keep[-1, rng.randint(1, n):] = 0
        return ids, keep

    def run(m, ids, keep):
        return m(input_ids=ids, attention_mask=keep).logits
    return model, inputs, run


def decoder(cfg):
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=1000, n_embd=cfg.hidden, n_layer=cfg.layers, n_head=4,
                        n_positions=256)
    model = GPT2LMHeadModel(config).eval()

    def inputs(rng):
        return (torch.randint(0, 1000, (cfg.batch, rng.randint(1, 256))),)

    def run(m, ids):
        return m(input_ids=ids, use_cache=False).logits[:, -1]
    return model, inputs, run


def mlp(cfg):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                                torch.nn.GELU(), torch.nn.Linear(256, 10)).eval()

    def inputs(rng):
        return (torch.randn(rng.randint(1, 512), 64),)

    def run(m, x):
        return m(x).softmax(-1)
    return model, inputs, run


WORKLOADS = {"encoder": encoder, "decoder": decoder, "mlp": mlp}


def measure(way, name, model, batches, run, steady):
    torch._dynamo.reset()
    from torch_tpu.dynamo import bucketed_graph, deferred_buckets
    bucketed_graph.reset_stats()
    deferred_buckets.reset()
    mode = contextlib.nullcontext()
    if way == "cpu":
        m = model
        fn = run
        to = lambda t: t  # noqa: E731
    elif way.startswith("dnf"):
        m = model.to("tpu")
        os.environ["TORCH_TPU_DEFER_BUCKETS"] = "0" if way == "dnf-per-size" else "1"
        fn = run
        to = lambda t: t.to("tpu")  # noqa: E731
        mode = torch_tpu.execution_mode("defer_and_fuse")
    else:
        m = model.to("tpu")
        opts = {"dynamic_buckets": False} if way == "per-size" else {}
        compiled = torch.compile(lambda *a: run(m, *a), backend="tpu", dynamic=True, options=opts)
        fn = lambda _m, *a: compiled(*a)  # noqa: E731
        to = lambda t: t.to("tpu")  # noqa: E731
    before = torch_tpu.debug.metrics()
    outs = []
    with torch.no_grad(), mode:
        t0 = time.perf_counter()
        for i, b in enumerate(batches):
            outs.append(fn(m, *[to(t) for t in b]).cpu())
            # A per-size run takes tens of minutes: one line a batch shows it is alive.
            if way == "cpu":
                continue
            done = torch_tpu.debug.metrics()["programs_compiled"] - before["programs_compiled"]
            print(f"[{name} {way}] batch {i + 1}/{len(batches)} shape {tuple(b[0].shape)} "
                  f"{time.perf_counter() - t0:.1f}s programs {done}", file=sys.stderr, flush=True)
        total = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in batches[:steady]:
            fn(m, *[to(t) for t in b]).cpu()
        per_batch = (time.perf_counter() - t0) / steady
    after = torch_tpu.debug.metrics()
    programs = after["programs_compiled"] - before["programs_compiled"] if way != "cpu" else 0
    stats = bucketed_graph.stats()
    if way.startswith("dnf"):
        d = deferred_buckets.stats()
        stats = dict(per_size_reasons=d["reasons"] if not d["bucketed"] else [],
                     dnf=f"bucketed {d['bucketed']}, learning {d['learning']}, "
                         f"unverified {d['unverified']}, unsupported {d['unsupported']}")
        os.environ.pop("TORCH_TPU_DEFER_BUCKETS", None)
    if way != "cpu":
        model.to("cpu")
    return dict(programs=programs, total=total, per_batch=per_batch, outs=outs,
                compile_s=after["compile_seconds"] - before["compile_seconds"], stats=stats)


def run_one(cfg, name, way):
    """Measures one workload one way in this process and appends its row to cfg.out."""
    torch.manual_seed(0)
    model, make, run = WORKLOADS[name](cfg)
    rng = random.Random(0)
    batches = [make(rng) for _ in range(cfg.batches)]
    distinct = len({tuple(t.shape for t in b) for b in batches})
    steady = min(cfg.steady, len(batches))
    load_start = os.getloadavg()[0]
    ref = measure("cpu", name, model, batches, run, steady)  # the reference (and the cpu row)
    r = ref if way == "cpu" else measure(way, name, model, batches, run, steady)
    err = max((o - c).abs().max().item() for o, c in zip(r["outs"], ref["outs"]))
    s = r["stats"]
    note = ""
    if way in ("buckets", "dnf-buckets") and s["per_size_reasons"]:
        note = s["per_size_reasons"][0].splitlines()[0][:80]
    if "dnf" in s:
        note = (s["dnf"] + " " + note).strip()
    row = dict(workload=name, batches=cfg.batches, distinct=distinct, way=way,
               programs=r["programs"], compile_s=r["compile_s"], total_s=r["total"],
               steady_ms=r["per_batch"] * 1e3, max_diff=err, note=note,
               load_start=load_start, load_end=os.getloadavg()[0])
    with open(cfg.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"{name:8s} {way:9s} programs={row['programs']:4d} compile={row['compile_s']:7.1f}s "
          f"total={row['total_s']:7.1f}s steady={row['steady_ms']:8.2f} ms/batch "
          f"max|diff vs cpu|={err:.2e} load {load_start:.1f}->{row['load_end']:.1f} {note}",
          flush=True)


def read_rows(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def print_table(rows):
    print(f"| workload | batches | distinct shapes | way | programs compiled | compile s | total s "
          f"| steady ms/batch | max abs diff vs CPU | load avg start-end |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cpu = r["way"] == "cpu"
        print(f"| {r['workload']} | {r['batches']} | {r['distinct']} | {r['way']} | "
              f"{'-' if cpu else r['programs']} | {'-' if cpu else format(r['compile_s'], '.1f')} | "
              f"{r['total_s']:.1f} | {r['steady_ms']:.2f} | {'-' if cpu else format(r['max_diff'], '.1e')} | "
              f"{r['load_start']:.1f}-{r['load_end']:.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--steady", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--workloads", default="encoder,decoder,mlp")
    p.add_argument("--ways", default="per-size,buckets,dnf-per-size,dnf-buckets,cpu")
    p.add_argument("--out", default=None,
                   help="JSON-lines results file; rows already in it are not run again "
                        "(default: a new temporary file)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # "workload:way", the child
    cfg = p.parse_args()
    if cfg.one:
        run_one(cfg, *cfg.one.split(":"))
        return
    if cfg.out is None:
        cfg.out = tempfile.mkstemp(prefix="tpu_dyn_bench_", suffix=".jsonl")[1]
    print(f"results: {cfg.out}", flush=True)
    for name in cfg.workloads.split(","):
        for way in cfg.ways.split(","):
            if any(r["workload"] == name and r["way"] == way and r["batches"] == cfg.batches
                   for r in read_rows(cfg.out)):
                continue  # measured by an earlier run into the same file
            # Each way in its own process with empty program caches: nothing compiled
            # by one way (on disk or in memory) is reused by the next.
            cache = tempfile.mkdtemp(prefix="tpu_dyn_bench_")
            env = dict(os.environ, TORCH_TPU_CACHE_DIR=os.path.join(cache, "tpu"),
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--out", cfg.out,
                            "--one", f"{name}:{way}"], env=env, check=True)
            shutil.rmtree(cache, ignore_errors=True)
    print()
    rows = [r for r in read_rows(cfg.out) if r["batches"] == cfg.batches
            and r["workload"] in cfg.workloads.split(",") and r["way"] in cfg.ways.split(",")]
    print_table(rows)


if __name__ == "__main__":
    main()

"""Dynamic shapes in torch.compile(backend="tpu"): buckets vs one program per size.

Three workloads over random sizes, each run these ways:
  per-size      torch.compile(..., dynamic=True, options={"dynamic_buckets": False})
  buckets       torch.compile(..., dynamic=True)   (powers of two, padded and masked)
  dnf-per-size  Defer & Fuse, TORCH_TPU_DEFER_BUCKETS=0 (one fused program per size)
  dnf-buckets   Defer & Fuse with its buckets (the default; deferred_buckets.py)
  cpu           PyTorch eager on the CPU
Workloads: (1) a BERT-style encoder classifier (Transformers BertConfig, random
weights) over batches of random lengths 1-512; (2) a GPT-2-style decoder prefill
(last-token logits) over random prompt lengths 1-256; (3) an MLP over random batch
sizes 1-512. For each: programs compiled, total wall time over all batches
(compiles included), steady-state time per batch (the first --steady batches run
again once everything is compiled), and the largest difference from the CPU.

    python benchmarks/dynamic_shapes.py                     # 200 batches each
    python benchmarks/dynamic_shapes.py --batches 40 --workloads encoder
    python benchmarks/dynamic_shapes.py --batches 40 --workloads encoder --ways dnf-per-size,dnf-buckets,cpu

Compiles are real: the program cache lives in a fresh temporary directory.
"""
import argparse
import contextlib
import os
import random
import tempfile
import time

os.environ["TORCH_TPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="tpu_dyn_bench_")

import torch  # noqa: E402

import torch_tpu  # noqa: E402


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


def measure(way, model, batches, run, steady):
    torch._dynamo.reset()
    from torch_tpu.dynamo import bucketed_graph
    bucketed_graph.reset_stats()
    from torch_tpu.dynamo import deferred_buckets
    deferred_buckets.reset()
    mode = contextlib.nullcontext()
    if way == "cpu":
        m = model
        fn = run
        to = lambda t: t  # noqa: E731
    elif way.startswith("dnf"):
        # Defer & Fuse's fused programs are cached by trace: each D&F way starts
        # with empty caches (memory and disk), so the other's programs are not hits
        torch_tpu.cache.clear(memory=True, disk=True)
        torch_tpu._C._clear_fused_cache()
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
        for b in batches:
            outs.append(fn(m, *[to(t) for t in b]).cpu())
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--steady", type=int, default=20)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--workloads", default="encoder,decoder,mlp")
    p.add_argument("--ways", default="per-size,buckets,dnf-per-size,dnf-buckets,cpu")
    cfg = p.parse_args()
    rows = []
    for name in cfg.workloads.split(","):
        torch.manual_seed(0)
        model, make, run = WORKLOADS[name](cfg)
        rng = random.Random(0)
        batches = [make(rng) for _ in range(cfg.batches)]
        distinct = len({tuple(t.shape for t in b) for b in batches})
        steady = min(cfg.steady, len(batches))
        ref = measure("cpu", model, batches, run, steady)  # the reference, and a row
        for way in cfg.ways.split(","):
            r = ref if way == "cpu" else measure(way, model, batches, run, steady)
            err = max((o - c).abs().max().item() for o, c in zip(r["outs"], ref["outs"]))
            s = r["stats"]
            note = ""
            if way in ("buckets", "dnf-buckets") and s["per_size_reasons"]:
                note = s["per_size_reasons"][0].splitlines()[0][:80]
            if "dnf" in s:
                note = (s["dnf"] + " " + note).strip()
            rows.append((name, distinct, way, r["programs"], r["compile_s"], r["total"],
                         r["per_batch"] * 1e3, err, note))
            print(f"{name:8s} {way:9s} programs={r['programs']:4d} compile={r['compile_s']:7.1f}s "
                  f"total={r['total']:7.1f}s steady={r['per_batch'] * 1e3:8.2f} ms/batch "
                  f"max|diff vs cpu|={err:.2e} {note}", flush=True)
    print()
    print(f"| workload | distinct shapes | way | programs compiled | compile s | total s "
          f"| steady ms/batch | max abs diff vs CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for name, distinct, way, progs, comp, total, pb, err, note in rows:
        print(f"| {name} | {distinct} | {way} | {progs if way != 'cpu' else '-'} | "
              f"{comp:.1f} | {total:.1f} | {pb:.2f} | {err:.1e} |")


if __name__ == "__main__":
    main()

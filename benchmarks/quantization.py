"""Weight memory, prefill time and decode tokens/s of the examples' Llama
(examples/llama) on tpu in fp32, bf16, int8 weight-only (torchao's
Int8WeightOnlyConfig), int4 weight-only and float8 (torch_tpu.quantization), and
torchao float8 training vs bf16 training of the minGPT example (examples/mingpt, its
character corpus): step time and loss curve.

    python benchmarks/quantization.py            # Llama width 1024, depth 4; 200 training steps
    python benchmarks/quantization.py --quick    # small sizes, a few steps

Each row runs in its own process (fresh allocator and program cache), Defer & Fuse.
Weight memory is torch.tpu.memory_allocated() after moving and quantising the model,
less what was allocated before. Timings are medians over --rounds after one warm-up.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
INFERENCE = ["fp32", "bf16", "int8wo", "int4wo", "float8"]


def _model(args, dtype):
    import torch
    sys.path.insert(0, ROOT)
    from examples.llama.train import build_model
    torch.manual_seed(0)
    return build_model("llama", args.vocab, args.width, args.depth, args.seq).to(dtype)


def _quantize(model, row):
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    from torch_tpu.quantization import (TpuFloat8DynamicActivationFloat8WeightConfig,
                                        TpuInt4WeightOnlyConfig)
    config = {"int8wo": Int8WeightOnlyConfig(), "int4wo": TpuInt4WeightOnlyConfig(128),
              "float8": TpuFloat8DynamicActivationFloat8WeightConfig()}.get(row)
    if config is not None:
        quantize_(model, config)


def run_inference_row(args, row):
    import torch
    import torch_tpu
    torch_tpu.set_execution_mode("defer_and_fuse")
    dtype = torch.float32 if row == "fp32" else torch.bfloat16
    model = _model(args, dtype).eval()
    torch.tpu.synchronize()
    start = torch.tpu.memory_allocated()
    model = model.to("tpu")
    _quantize(model, row)
    torch.tpu.synchronize()
    weights = torch.tpu.memory_allocated() - start
    ids = torch.randint(2, args.vocab, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    ids = ids.to("tpu")
    kw = dict(do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)
    prefill, full = [], []
    with torch.no_grad():
        model.generate(input_ids=ids, max_new_tokens=args.new_tokens, **kw).cpu()  # warm-up
        model.generate(input_ids=ids, max_new_tokens=1, **kw).cpu()
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            model.generate(input_ids=ids, max_new_tokens=1, **kw).cpu()
            t1 = time.perf_counter()
            model.generate(input_ids=ids, max_new_tokens=args.new_tokens, **kw).cpu()
            t2 = time.perf_counter()
            prefill.append(t1 - t0)
            full.append(t2 - t1)
    p, f = statistics.median(prefill), statistics.median(full)
    fallback = sum(torch_tpu.debug.metrics()["cpu_fallback_counts"].values())
    return dict(row=row, weight_mib=weights / 2**20, prefill_ms=p * 1e3,
                decode_tok_s=(args.new_tokens - 1) / max(f - p, 1e-9), cpu_fallbacks=fallback)


def lr_at(step, args):
    """Linear warm-up over --train-warmup steps to --train-lr, then cosine decay to a
    tenth of it at the last step: without the warm-up, AdamW at the example's 3e-3
    spikes in the first steps and a single run's final loss moves by several percent."""
    if step < args.train_warmup:
        return args.train_lr * (step + 1) / args.train_warmup
    frac = (step - args.train_warmup) / max(args.train_steps - args.train_warmup - 1, 1)
    return args.train_lr * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))


def run_training_row(args, row):
    """The minGPT example (examples/mingpt) on its character corpus, AdamW with warm-up
    and cosine decay (lr_at), float32 weights and bfloat16 autocast (or, with
    --train-bf16-weights, bfloat16 weights); float8_train converts every linear but the
    tied output head (its vocabulary is not a multiple of 16) with torchao's tensor-wise
    recipe. The same initial weights and batches (--train-seed) in both rows.
    --train-device cpu runs the same training on PyTorch's CPU backend (the reference:
    torchao's float8 there is PyTorch's own _scaled_mm)."""
    import torch
    import torch_tpu
    torch_tpu.set_execution_mode("defer_and_fuse")
    sys.path.insert(0, ROOT)
    from examples.mingpt.data import CharData
    from examples.mingpt.model import GPT, GPTConfig
    data = CharData()
    torch.manual_seed(args.train_seed)
    model = GPT(GPTConfig(vocab_size=data.vocab_size, block_size=args.gpt_context,
                          n_layer=args.gpt_depth, n_head=4, n_embd=args.gpt_width))
    dev = args.train_device
    model = (model.to(torch.bfloat16) if args.train_bf16_weights else model).to(dev)
    if row == "float8_train":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(
            model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
            module_filter_fn=lambda m, name: name != "head")
    opt = torch.optim.AdamW(model.parameters(), lr=lr_at(0, args), weight_decay=0.01)
    g = torch.Generator().manual_seed(args.train_seed)
    losses, times = [], []
    for step in range(args.train_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args)
        x, y = (t.to(dev) for t in data.batch(args.gpt_batch, args.gpt_context, g))
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=not args.train_bf16_weights):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    warm = times[2:] or times
    tail = losses[-10:]
    return dict(row=row, seed=args.train_seed, step_ms=statistics.median(warm) * 1e3,
                steps=args.train_steps, loss_first=losses[0], loss_mid=losses[len(losses) // 2],
                loss_last=losses[-1], loss_last10=sum(tail) / len(tail),
                losses=[round(v, 4) for v in losses],
                cpu_fallbacks=sum(torch_tpu.debug.metrics()["cpu_fallback_counts"].values()))


def _spread(values):
    """mean, sample standard deviation (0 for one value)."""
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def print_training(results):
    train = [r for r in results if "step_ms" in r]
    if not train:
        return
    rows = list(dict.fromkeys(r["row"] for r in train))
    seeds = sorted({r["seed"] for r in train})
    by = {(r["row"], r["seed"]): r for r in train}
    print("\n| seed | " + " | ".join(f"{row} step ms | {row} mean of last 10" for row in rows)
          + (" | float8 vs bf16 |" if set(rows) >= {"bf16_train", "float8_train"} else " |"))
    print("|---" * (1 + 2 * len(rows) + (set(rows) >= {"bf16_train", "float8_train"})) + "|")
    for seed in seeds:
        cells = []
        for row in rows:
            r = by.get((row, seed))
            cells += [f"{r['step_ms']:.1f}", f"{r['loss_last10']:.4f}"] if r else ["-", "-"]
        b, f = by.get(("bf16_train", seed)), by.get(("float8_train", seed))
        rel = f" | {(f['loss_last10'] / b['loss_last10'] - 1) * 100:+.2f}%" if b and f else ""
        print(f"| {seed} | " + " | ".join(cells) + rel + " |")
    summary = {}
    for row in rows:
        last = [r["loss_last10"] for r in train if r["row"] == row]
        steps = [r["step_ms"] for r in train if r["row"] == row]
        summary[row] = _spread(last)
        print(f"{row}: mean of last 10 losses over {len(last)} seeds {summary[row][0]:.4f} "
              f"± {summary[row][1]:.4f} (sample std), min {min(last):.4f} max {max(last):.4f}; "
              f"median step {statistics.median(steps):.1f} ms; CPU fallbacks "
              f"{sum(r['cpu_fallbacks'] for r in train if r['row'] == row)}")
    pairs = [(by[("float8_train", s)]["loss_last10"] / by[("bf16_train", s)]["loss_last10"] - 1) * 100
             for s in seeds if ("float8_train", s) in by and ("bf16_train", s) in by]
    if pairs:
        m, sd = _spread(pairs)
        print(f"float8 vs bf16, paired by seed: {m:+.2f}% ± {sd:.2f}% (mean ± sample std over "
              f"{len(pairs)} seeds); ratio of the means "
              f"{(summary['float8_train'][0] / summary['bf16_train'][0] - 1) * 100:+.2f}%")
    for row in rows:  # the mean loss curve over the seeds, every 20th step and the last
        curves = [r["losses"] for r in train if r["row"] == row]
        mean = [statistics.mean(c[i] for c in curves) for i in range(len(curves[0]))]
        print(f"{row} mean loss every 20 steps: " + " ".join(f"{v:.3f}" for v in mean[::20] + mean[-1:]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small model, few rounds and steps")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gpt-width", type=int, default=128, help="training rows: minGPT width")
    p.add_argument("--gpt-depth", type=int, default=2)
    p.add_argument("--gpt-batch", type=int, default=16)
    p.add_argument("--gpt-context", type=int, default=64)
    p.add_argument("--train-seeds", default="0,1,2,3,4",
                   help="training rows: one run per seed (initial weights and batches)")
    p.add_argument("--train-seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--train-lr", type=float, default=1e-3, help="training rows: peak learning rate")
    p.add_argument("--train-warmup", type=int, default=20, help="training rows: warm-up steps")
    p.add_argument("--train-bf16-weights", action="store_true",
                   help="training rows: bfloat16 weights (default: float32 weights, bfloat16 autocast)")
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--train-device", default="tpu", choices=["tpu", "cpu"],
                   help="training rows: cpu runs them on PyTorch's CPU backend, the reference")
    p.add_argument("--rows", default=",".join(INFERENCE + ["bf16_train", "float8_train"]))
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.width, args.depth, args.new_tokens, args.rounds, args.train_steps = 256, 2, 8, 2, 10
        args.train_warmup = 2
        if not any(a.startswith("--train-seeds") for a in sys.argv):
            args.train_seeds = "0"
    if args.one:
        fn = run_training_row if args.one.endswith("_train") else run_inference_row
        print("RESULT " + json.dumps(fn(args, args.one)))
        return
    passthrough, skip = [], False  # the command line less --rows (each child gets --one)
    for a in sys.argv[1:]:
        if not skip and not a.startswith("--rows"):
            passthrough.append(a)
        skip = a == "--rows"
    print(f"Llama width {args.width} depth {args.depth} vocab {args.vocab}; prompt {args.prompt}, "
          f"{args.new_tokens} new tokens, {args.rounds} rounds; training: minGPT width {args.gpt_width} "
          f"depth {args.gpt_depth}, batch {args.gpt_batch}x{args.gpt_context}, {args.train_steps} steps, "
          f"AdamW lr {args.train_lr:g} ({args.train_warmup} warm-up steps, cosine decay), "
          f"{'bfloat16 weights' if args.train_bf16_weights else 'float32 weights + bfloat16 autocast'}, "
          f"seeds {args.train_seeds}, on {args.train_device}")
    rows = args.rows.split(",")
    # Inference rows in order, then the training rows interleaved by seed (bf16 seed 0,
    # float8 seed 0, bf16 seed 1, ...) so that a change of machine load hits both alike.
    runs = [(row, []) for row in rows if not row.endswith("_train")]
    runs += [(row, ["--train-seed", seed]) for seed in args.train_seeds.split(",")
             for row in rows if row.endswith("_train")]
    results = []
    for row, extra in runs:
        out = subprocess.run([sys.executable, __file__, *passthrough, *extra, "--one", row],
                             capture_output=True, text=True, cwd=ROOT)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode or not line:
            print(f"{row} {' '.join(extra)}: failed\n{out.stderr[-2000:]}")
            continue
        results.append(json.loads(line[0][7:]))
        print(json.dumps(results[-1]), flush=True)
    fp32 = next((r["weight_mib"] for r in results if r["row"] == "fp32"), None)
    bf16_tok = next((r["decode_tok_s"] for r in results if r["row"] == "bf16"), None)
    if any("weight_mib" in r for r in results):
        print("\n| row | weight MiB | vs fp32 | prefill ms | decode tok/s | decode vs bf16 | CPU fallbacks |")
        print("|---|---|---|---|---|---|---|")
    for r in results:
        if "weight_mib" in r:
            rel = f"{r['weight_mib'] / fp32:.3f}x" if fp32 else "-"
            speed = f"{r['decode_tok_s'] / bf16_tok:.2f}x" if bf16_tok else "-"
            print(f"| {r['row']} | {r['weight_mib']:.1f} | {rel} | {r['prefill_ms']:.1f} | "
                  f"{r['decode_tok_s']:.3g} | {speed} | {r['cpu_fallbacks']} |")
    print_training(results)

if __name__ == "__main__":
    main()

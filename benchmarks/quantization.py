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


def run_training_row(args, row):
    """The minGPT example (examples/mingpt) on its character corpus, AdamW, bfloat16
    weights (or, with --train-autocast, float32 weights and bfloat16 autocast);
    float8_train converts every linear but the tied output head (its vocabulary is not a
    multiple of 16) with torchao's tensor-wise recipe. The same initial weights and
    batches in both rows."""
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
    model = (model if args.train_autocast else model.to(torch.bfloat16)).to("tpu")
    if row == "float8_train":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        convert_to_float8_training(
            model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
            module_filter_fn=lambda m, name: name != "head")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(args.train_seed)
    losses, times = [], []
    for step in range(args.train_steps):
        x, y = (t.to("tpu") for t in data.batch(args.gpt_batch, args.gpt_context, g))
        t0 = time.perf_counter()
        with torch.autocast("tpu", dtype=torch.bfloat16, enabled=args.train_autocast):
            _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    warm = times[2:] or times
    tail = losses[-10:]
    return dict(row=row, step_ms=statistics.median(warm) * 1e3, steps=args.train_steps,
                loss_first=losses[0], loss_mid=losses[len(losses) // 2], loss_last=losses[-1],
                loss_last10=sum(tail) / len(tail), losses=[round(v, 4) for v in losses],
                cpu_fallbacks=sum(torch_tpu.debug.metrics()["cpu_fallback_counts"].values()))


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
    p.add_argument("--train-seed", type=int, default=0, help="training rows: initial weights and batches")
    p.add_argument("--train-autocast", action="store_true",
                   help="training rows: float32 weights, bfloat16 autocast (default: bfloat16 weights)")
    p.add_argument("--train-steps", type=int, default=200)
    p.add_argument("--rows", default=",".join(INFERENCE + ["bf16_train", "float8_train"]))
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.width, args.depth, args.new_tokens, args.rounds, args.train_steps = 256, 2, 8, 2, 10
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
          f"{'float32 weights + bfloat16 autocast' if args.train_autocast else 'bfloat16 weights'}")
    results = []
    for row in args.rows.split(","):
        out = subprocess.run([sys.executable, __file__, *passthrough, "--one", row],
                             capture_output=True, text=True, cwd=ROOT)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode or not line:
            print(f"{row}: failed\n{out.stderr[-2000:]}")
            continue
        results.append(json.loads(line[0][7:]))
        print(json.dumps(results[-1]), flush=True)
    fp32 = next((r["weight_mib"] for r in results if r["row"] == "fp32"), None)
    bf16_tok = next((r["decode_tok_s"] for r in results if r["row"] == "bf16"), None)
    print("\n| row | weight MiB | vs fp32 | prefill ms | decode tok/s | decode vs bf16 | CPU fallbacks |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "weight_mib" in r:
            rel = f"{r['weight_mib'] / fp32:.3f}x" if fp32 else "-"
            speed = f"{r['decode_tok_s'] / bf16_tok:.2f}x" if bf16_tok else "-"
            print(f"| {r['row']} | {r['weight_mib']:.1f} | {rel} | {r['prefill_ms']:.1f} | "
                  f"{r['decode_tok_s']:.3g} | {speed} | {r['cpu_fallbacks']} |")
    bf16 = next((r["loss_last10"] for r in results if r["row"] == "bf16_train"), None)
    print("\n| training | step ms | steps | loss first / mid / last | mean of last 10 | vs bf16 "
          "| CPU fallbacks |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "step_ms" in r:
            rel = f"{(r['loss_last10'] / bf16 - 1) * 100:+.2f}%" if bf16 else "-"
            print(f"| {r['row']} | {r['step_ms']:.1f} | {r['steps']} | {r['loss_first']:.3f} / "
                  f"{r['loss_mid']:.3f} / {r['loss_last']:.3f} | {r['loss_last10']:.3f} | {rel} "
                  f"| {r['cpu_fallbacks']} |")
    for r in results:
        if "losses" in r:  # the loss curve, every 20th step
            print(f"{r['row']} loss every 20 steps: " +
                  " ".join(f"{v:.3f}" for v in r["losses"][::20] + r["losses"][-1:]))


if __name__ == "__main__":
    main()

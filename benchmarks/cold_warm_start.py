"""Time to the first training step of a minGPT-size model in a fresh process, with a
cold and then a warm persistent compile cache.

    python benchmarks/cold_warm_start.py [--warm-runs 2] [--cache-dir DIR]

Each run is a new interpreter (as a user's job is) sharing one cache directory
(a temporary one unless --cache-dir is given). The target: a warm start performs
zero compiles.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()


def child(mode):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch_tpu

    t_import = time.perf_counter() - T0
    vocab, width, layers, heads, context, batch = 65, 256, 4, 8, 128, 8

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))
            self.register_buffer("mask", torch.tril(torch.ones(context, context)).bool())

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // heads) ** 0.5)
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.blocks(self.tok(idx) + self.pos(pos))
            return self.head(self.ln(x))

    torch.manual_seed(0)
    model = GPT().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, vocab, (batch, context + 1))
    x, y = data[:, :-1].to("tpu"), data[:, 1:].to("tpu")
    t_step0 = time.perf_counter()
    logits = model(x)
    loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss_value = loss.item()
    torch.tpu.synchronize()
    t_done = time.perf_counter()
    s = torch_tpu.cache.stats()
    m = torch_tpu.debug.metrics()
    print("RESULT " + json.dumps({
        "mode": mode, "loss": loss_value, "import_s": t_import, "first_step_s": t_done - t_step0,
        "process_to_step_s": t_done - T0, "compiles": s["compiles"],
        "compile_s": s["compile_seconds"], "disk_hits": s["disk_hits"],
        "disk_load_s": s["disk_load_seconds"], "disk_writes": s["disk_writes"],
        "cpu_fallback_ops": m["cpu_fallback_ops"]}))


def run(mode, cache_dir):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=cache_dir)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode], env=env,
                       capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{mode} run failed:\n{r.stderr[-4000:]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--warm-runs", type=int, default=2)
    ap.add_argument("--cache-dir", help="cache directory (default: a new temporary one, "
                    "so that the first run is cold)")
    args = ap.parse_args()
    if args.child:
        return child(args.child)

    with tempfile.TemporaryDirectory(prefix="torch_tpu_bench_cache_") as tmp:
        cache_dir = args.cache_dir or tmp
        rows = [run("cold", cache_dir)] + [run(f"warm{i + 1}", cache_dir)
                                           for i in range(args.warm_runs)]
    print("minGPT (4 layers, width 256, context 128, batch 8, vocab 65): first training step "
          "(forward, backward, AdamW) in a fresh process;\ncounts cover the whole process")
    print(f"{'run':<7} {'compiles':>8} {'compile s':>9} {'disk hits':>9} {'load s':>7} "
          f"{'step s':>7} {'import s':>8} {'total s':>8} {'loss':>8}")
    for r in rows:
        print(f"{r['mode']:<7} {r['compiles']:>8} {r['compile_s']:>9.2f} {r['disk_hits']:>9} "
              f"{r['disk_load_s']:>7.2f} {r['first_step_s']:>7.2f} {r['import_s']:>8.2f} "
              f"{r['process_to_step_s']:>8.2f} {r['loss']:>8.4f}")
    if rows[0]["cpu_fallback_ops"]:
        print(f"(ops run on the CPU in the step: {rows[0]['cpu_fallback_ops']})")
    warm_compiles = [r["compiles"] for r in rows[1:]]
    print("warm start compiles:", warm_compiles, "(target: 0)")
    return 0 if all(c == 0 for c in warm_compiles) else 1


if __name__ == "__main__":
    sys.exit(main())

"""KV-cache write time against cache size: an in-place update costs the same whatever
the cache size; a copy of the cache grows with it.

    python benchmarks/kv_cache_write.py [--sizes 2,32,128] [--steps 20]

One write of 64 tokens (4 kv heads x 64, float32) per step, then a synchronize, as a
serving step does; mean ms per step after 3 warm-up steps. Rows:
  eager      Strict Eager: tpu::write_kv_cache_ (its own program, the cache donated)
  fused      Defer & Fuse: the same op in a fused program (the cache aliased and donated)
  compiled   torch.compile(backend="tpu"): the functionalized write (clone, write, copy_
             back) as one program, the cache aliased and donated
  functional tpu::write_kv_cache (returns a new cache): the cost of a copy, for scale
Each mode runs in its own process (the execution mode is per process).
"""
import argparse
import json
import os
import subprocess
import sys
import time

BLOCK, HEADS, DIM, TOKENS = 16, 4, 64, 64


def child(mode, sizes_mib, steps):
    import torch
    import torch_tpu

    def inplace(kv, key, slots):
        torch.ops.tpu.write_kv_cache_(kv, key, key, slots)
        return kv

    def functional(kv, key, slots):
        return torch.ops.tpu.write_kv_cache(kv, key, key, slots)

    fn = functional if mode == "functional" else inplace
    if mode == "compiled":
        fn = torch.compile(inplace, backend="tpu", fullgraph=True, dynamic=False)
    out = {}
    for mib in sizes_mib:
        nblocks = mib * 2**20 // (2 * BLOCK * HEADS * DIM * 4)
        kv = torch.zeros(2, nblocks, BLOCK, HEADS, DIM).to("tpu")
        key = torch.randn(TOKENS, HEADS, DIM, device="tpu")
        slots = torch.randperm(nblocks * BLOCK)[:TOKENS].to("tpu")
        for _ in range(3):
            kv = fn(kv, key, slots)
            torch.tpu.synchronize()
        donated = torch_tpu.debug.metrics()["donated_inputs"]
        t0 = time.perf_counter()
        for _ in range(steps):
            kv = fn(kv, key, slots)
            torch.tpu.synchronize()
        ms = (time.perf_counter() - t0) / steps * 1e3
        out[mib] = dict(ms=ms, donated=torch_tpu.debug.metrics()["donated_inputs"] - donated)
        del kv
    print("RESULT " + json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,32,128", help="cache sizes in MiB")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.child:
        return child(a.child, sizes, a.steps)
    rows = {}
    for mode in ("eager", "fused", "compiled", "functional"):
        env = dict(os.environ)
        if mode == "fused":
            env["TORCH_TPU_EXECUTION_MODE"] = "defer_and_fuse"
        p = subprocess.run([sys.executable, __file__, "--child", mode, "--sizes", a.sizes,
                            "--steps", str(a.steps)], env=env, capture_output=True, text=True)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not line:
            sys.exit(f"{mode} failed:\n{p.stderr[-2000:]}")
        rows[mode] = json.loads(line[-1][7:])
    print("| mode | " + " | ".join(f"{s} MiB cache" for s in sizes) + " | donated per step |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for mode, r in rows.items():
        cells = " | ".join(f"{r[str(s)]['ms']:.2f} ms" for s in sizes)
        don = r[str(sizes[-1])]["donated"] / a.steps
        print(f"| {mode} | {cells} | {don:.0f} |")


if __name__ == "__main__":
    main()

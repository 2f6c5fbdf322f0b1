"""The GPT training step's matrix products one at a time in Strict Eager, by the form
XLA gives them (NT: x @ W^T, NN: g @ W, TN: the weight gradient g^T @ x, and the
attention products), as CPU time per call and GFLOP/s per CPU-second. CPU time, not
wall time, so a loaded machine still gives comparable figures; compare forms and
XLA_FLAGS settings with it. A script, not a test.

    python benchmarks/dot_forms.py [--reps 10]
    python benchmarks/dot_forms.py --cpu        # PyTorch's CPU GEMM (MKL) beside each form
    XLA_FLAGS=--xla_cpu_use_onednn=true python benchmarks/dot_forms.py
"""
import argparse
import statistics
import time

# name: (function, lhs shape, rhs shape); shapes of GPT 4x256, context 128, batch 8
FORMS = {
    "NT qkv  x[1024,256] @ W[768,256]^T": (lambda a, b: a @ b.t(), (1024, 256), (768, 256)),
    "NT fc1  x[1024,256] @ W[1024,256]^T": (lambda a, b: a @ b.t(), (1024, 256), (1024, 256)),
    "NT fc2  h[1024,1024] @ W[256,1024]^T": (lambda a, b: a @ b.t(), (1024, 1024), (256, 1024)),
    "NN dX   g[1024,1024] @ W[1024,256]": (lambda a, b: a @ b, (1024, 1024), (1024, 256)),
    "TN dW   g[1024,1024]^T @ x[1024,256]": (lambda a, b: a.t() @ b, (1024, 1024), (1024, 256)),
    "attn    q[32,128,64] @ k^T": (lambda a, b: a @ b.transpose(1, 2), (32, 128, 64), (32, 128, 64)),
    "attn    p[32,128,128] @ v[32,128,64]": (lambda a, b: a @ b, (32, 128, 128), (32, 128, 64)),
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cpu", action="store_true",
                   help="also time each product on PyTorch's CPU backend, in this process")
    args = p.parse_args()
    import torch
    import torch_tpu
    torch_tpu.set_execution_mode("strict_eager")
    g = torch.Generator().manual_seed(0)
    head = f"{'form':40s} {'CPU ms/call':>12s} {'GFLOP/s per CPU-s':>18s}"
    print(head + (f" {'PyTorch CPU ms/call':>20s}" if args.cpu else ""))

    def cpu_ms(f, a, b, sync):
        for _ in range(3):
            f(a, b)
        sync()
        cpu = []
        for _ in range(args.rounds):
            c0 = time.process_time()
            for _ in range(args.reps):
                f(a, b)
            sync()
            cpu.append((time.process_time() - c0) / args.reps)
        return statistics.median(cpu)

    for name, (f, sa, sb) in FORMS.items():
        a = torch.randn(*sa, generator=g)
        b = torch.randn(*sb, generator=g)
        out = f(a, b)
        inner = sa[0] if name.startswith("TN") else sa[-1]  # the contracted length
        work = 2 * out.numel() * inner
        t = cpu_ms(f, a.to("tpu"), b.to("tpu"), torch.tpu.synchronize)
        line = f"{name:40s} {t * 1e3:12.2f} {work / t / 1e9:18.1f}"
        if args.cpu:
            line += f" {cpu_ms(f, a, b, lambda: None) * 1e3:20.2f}"
        print(line)

if __name__ == "__main__":
    main()

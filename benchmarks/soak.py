"""Soak: many small training steps (an MLP, or minGPT-tiny) in Strict Eager and in
Defer & Fuse, sampling the process's resident memory (host RSS) and the device bytes
in use (torch.tpu.memory_allocated) every --every steps. A leak shows as growth from
the first quarter of the run to the last; the report gives both quarters' means and
the growth, and exits non-zero when either grows by more than --tolerance.

    nice -n 15 python benchmarks/soak.py [--steps 5000] [--model mlp|mingpt]
                                          [--modes strict_eager,defer_and_fuse]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build(model):
    import torch
    torch.manual_seed(0)
    if model == "mingpt":
        from workloads import build as build_workload
        net, x, y = build_workload("mingpt", "smoke", "tpu")
        return net, x, y
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to("tpu")
    x = torch.randn(16, 32, device="tpu")
    y = torch.randint(0, 10, (16,), device="tpu")

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, y):
            out = self.net(x)
            return out, torch.nn.functional.cross_entropy(out, y)
    return WithLoss(), (x,), y


def soak(model, mode, steps, every):
    import torch
    import torch_tpu
    torch_tpu.set_execution_mode(mode)
    net, x, y = build(model)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    samples = []  # (step, rss, device bytes)
    for i in range(1, steps + 1):
        _, loss = net(*x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i % every == 0:
            loss.item()
            torch.tpu.synchronize()
            samples.append((i, rss_bytes(), torch.tpu.memory_allocated()))
    q = max(1, len(samples) // 4)
    first, last = samples[:q], samples[-q:]
    out = dict(model=model, mode=mode, steps=steps, samples=len(samples))
    for k, name in ((1, "rss"), (2, "device")):
        a = statistics.mean(s[k] for s in first)
        b = statistics.mean(s[k] for s in last)
        out[f"{name}_first_quarter_mb"] = a / 2**20
        out[f"{name}_last_quarter_mb"] = b / 2**20
        out[f"{name}_growth_pct"] = 100 * (b / a - 1) if a else 0.0
    out["final_loss"] = loss.item()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--model", default="mlp", choices=("mlp", "mingpt"))
    p.add_argument("--modes", default="strict_eager,defer_and_fuse")
    p.add_argument("--tolerance", type=float, default=5.0, help="allowed growth, percent")
    a = p.parse_args()
    ok = True
    for mode in a.modes.split(","):
        r = soak(a.model, mode, a.steps, a.every)
        print(json.dumps(r), flush=True)
        ok &= r["rss_growth_pct"] <= a.tolerance and r["device_growth_pct"] <= a.tolerance
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

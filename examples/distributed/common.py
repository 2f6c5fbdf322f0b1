"""What the distributed minGPT examples share: arguments, the process group, the
global batches every rank draws alike, and the check against one CPU process."""
import argparse
import datetime
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from examples.mingpt.data import CharData  # noqa: E402
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402


def parser(doc, steps=20):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="tpu", help="tpu (default) or cpu (with Gloo)")
    p.add_argument("--mode", choices=["defer_and_fuse", "strict_eager"], default="defer_and_fuse")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--batch", type=int, default=8, help="global batch (all ranks together)")
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true",
                   help="after --check-steps steps, parameters equal a single-process CPU run")
    p.add_argument("--check-steps", type=int, default=4)
    return p


def setup(args):
    """Starts the process group for --device; returns (rank, world size, device)."""
    if args.device == "tpu":
        import torch_tpu
        torch_tpu.set_execution_mode(args.mode)
    backend = "tpu" if args.device == "tpu" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    device = torch.device(args.device)
    if args.device == "tpu":
        device = torch.device("tpu", torch.tpu.current_device())
    return dist.get_rank(), dist.get_world_size(), device


def build_model(args, data, device="cpu"):
    torch.manual_seed(args.seed)  # the same initial weights in every process
    cfg = GPTConfig(vocab_size=data.vocab_size, block_size=args.context, n_layer=args.depth,
                    n_head=args.heads, n_embd=args.width)
    return GPT(cfg).to(device)


def optimizer(args, params, foreach=None):
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01, foreach=foreach)


class Batches:
    """The global batches of a run: every process draws the same ones (same seed)
    and takes its own rows; the CPU reference takes them all."""

    def __init__(self, args, data):
        self.args, self.data = args, data
        self.g = torch.Generator().manual_seed(args.seed + 1)

    def next(self):
        return self.data.batch(self.args.batch, self.args.context, self.g)


def shard(x, rank, world):
    n = x.size(0) // world
    return x[rank * n:(rank + 1) * n]


def reference_params(args, data, micro_steps=1):
    """Parameters after --check-steps AdamW steps of one CPU process on the whole
    global batch (each step `micro_steps` accumulated micro-batches)."""
    model = build_model(args, data)
    opt = optimizer(args, model.parameters())
    batches = Batches(args, data)
    for _ in range(args.check_steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(micro_steps):
            x, y = batches.next()
            _, loss = model(x, y)
            (loss / micro_steps).backward()
        opt.step()
    return dict(model.named_parameters())


def compare_params(got, want, lr, steps, rtol=2e-4, atol=2e-5):
    """Fails unless every parameter matches (got: name -> full tensor on any device).

    One exception: the key part of each attention's qkv bias has a zero gradient
    in exact arithmetic (softmax ignores a constant added to every score), so
    AdamW turns either run's rounding noise there into steps of up to lr; those
    entries need only agree within lr * steps."""
    worst = 0.0
    for name, w in want.items():
        g = got[name].detach().cpu().float()
        w = w.detach().float()
        if name.endswith("attn.qkv.bias"):
            c = w.numel() // 3
            torch.testing.assert_close(g[c:2 * c], w[c:2 * c], rtol=0, atol=lr * steps,
                                       msg=lambda m: f"{name} (key part): {m}")
            g = torch.cat([g[:c], g[2 * c:]])
            w = torch.cat([w[:c], w[2 * c:]])
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")
        worst = max(worst, (g - w).abs().max().item())
    print(f"check: {len(want)} parameters equal the single-process CPU run "
          f"(largest difference {worst:.2e})", flush=True)


def data():
    return CharData()

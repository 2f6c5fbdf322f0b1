"""Train the minGPT character model on the shipped corpus, then sample from it.

Plain PyTorch: the device is a flag (default `tpu`, the CPU PJRT plugin unless
TORCH_TPU_PLATFORM says otherwise), the execution mode another.

    python examples/mingpt/train.py                      # Defer & Fuse on tpu
    python examples/mingpt/train.py --mode strict_eager --steps 100
    python examples/mingpt/train.py --mode compile       # torch.compile(backend="tpu")
    python examples/mingpt/train.py --device cpu         # PyTorch's CPU backend
    python examples/mingpt/train.py --check              # a few steps on tpu and CPU agree
    python examples/mingpt/train.py --amp bf16           # bfloat16 autocast (fp16: + GradScaler)
    python examples/mingpt/train.py --attention pallas --check   # Pallas attention vs the CPU

--attention pallas replaces the attention by the Pallas kernel of pallas_attention.py
(a torch_tpu.kernels.jax_op, Pallas interpret mode); the CPU run of --check keeps
PyTorch's attention, the reference the kernel is checked against.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402

from examples import harness  # noqa: E402
from examples.mingpt.data import CharData  # noqa: E402
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402


def build(args, vocab_size, device, attention):
    torch.manual_seed(args.seed)  # the same initial weights on every device
    cfg = GPTConfig(vocab_size=vocab_size, block_size=args.context, n_layer=args.depth,
                    n_head=args.heads, n_embd=args.width, attention=attention)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr or 3e-3, weight_decay=0.01)
    return model, opt


def train(args, data, device, mode, steps, quiet=False, attention=None):
    """Trains `steps` steps; returns (model, the callable model, losses, seconds per step).
    `attention` overrides --attention (the --check reference)."""
    g = torch.Generator().manual_seed(args.seed)  # the same batches on every device
    attention = attention or args.attention
    return harness.train_loop(lambda dev: build(args, data.vocab_size, dev, attention),
                              lambda: data.batch(args.batch, args.context, g),
                              device, mode, steps, f"train {device} {mode}", quiet, args.amp)


@torch.no_grad()
def sample(fwd, data, device, context, chars, prompt, seed, amp="off"):
    """Generates `chars` characters after `prompt`. The model always sees a full
    window (left-padded with newlines), so every call has one shape and compiles
    once; the next character is drawn on the host from the last position's logits."""
    g = torch.Generator().manual_seed(seed)
    pad = data.encode("\n")[0]
    ids = data.encode(prompt)
    for _ in range(chars):
        window = ([pad] * context + ids)[-context:]
        with harness.autocast(device, amp):
            logits, _ = fwd(torch.tensor([window], device=device))
        probs = torch.softmax(logits[0, -1].float().cpu(), dim=-1)
        ids.append(int(torch.multinomial(probs, 1, generator=g)))
    return data.decode(ids)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, steps=200, batch=16, width=128, depth=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=64, help="context length in characters")
    p.add_argument("--sample-chars", type=int, default=200)
    p.add_argument("--prompt", default="THE ")
    p.add_argument("--attention", choices=["manual", "pallas"], default="manual",
                   help="attention in PyTorch ops (default) or the Pallas kernel (on the device)")
    args = p.parse_args()

    data = CharData()
    harness.announce(args.device)
    print(f"minGPT {args.depth} layers x {args.width} wide, {args.heads} heads, context "
          f"{args.context}, batch {args.batch}, attention {args.attention}; corpus "
          f"{len(data.ids)} characters, vocabulary {data.vocab_size}; device {args.device}, "
          f"mode {args.mode}, amp {args.amp}")
    if args.check:
        # The CPU reference run uses PyTorch's attention, whatever --attention says.
        return harness.check(
            lambda dev, *a: train(args, data, dev, *a,
                                  attention=None if dev == args.device else "manual"), args)

    model, fwd, losses, times = train(args, data, args.device, args.mode, args.steps,
                                      quiet=args.quiet)
    rate, timed = harness.throughput(times, args.batch * args.context)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {args.steps} steps")
    print(f"first step {times[0]:.2f} s (includes compiling); {rate:,.0f} "
          f"tokens/s over the {timed} steps after it")
    model.eval()
    start = time.perf_counter()
    text = sample(fwd, data, args.device, args.context, args.sample_chars, args.prompt,
                  args.seed, args.amp)
    print(f"sample ({args.sample_chars} characters, {time.perf_counter() - start:.1f} s):")
    print("-" * 40 + "\n" + text + "\n" + "-" * 40)


if __name__ == "__main__":
    main()

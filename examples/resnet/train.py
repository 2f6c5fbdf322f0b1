"""Train a ResNet-18-style network on generated striped images, then evaluate it.

Ten classes (five stripe orientations x two stripe frequencies) with random phase,
colour, contrast and noise; chance is 10% accuracy, loss ln(10) = 2.30.

    python examples/resnet/train.py                      # Defer & Fuse on tpu
    python examples/resnet/train.py --mode strict_eager --steps 50
    python examples/resnet/train.py --mode compile       # torch.compile(backend="tpu")
    python examples/resnet/train.py --device cpu         # PyTorch's CPU backend
    python examples/resnet/train.py --check              # a few steps on tpu and CPU agree
    python examples/resnet/train.py --amp bf16           # bfloat16 autocast (fp16: + GradScaler)
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402

from examples import harness  # noqa: E402
from examples.resnet.data import NUM_CLASSES, ImageData  # noqa: E402
from examples.resnet.model import ResNet  # noqa: E402


def build(args, device):
    torch.manual_seed(args.seed)  # the same initial weights on every device
    model = ResNet(num_classes=NUM_CLASSES, width=args.width,
                   blocks=(2,) * args.depth).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr or 3e-3)
    return model, opt


def train(args, data, device, mode, steps, quiet=False):
    g = torch.Generator().manual_seed(args.seed)  # the same batches on every device
    return harness.train_loop(lambda dev: build(args, dev), lambda: data.batch(args.batch, g),
                              device, mode, steps, f"train {device} {mode}", quiet, args.amp)


@torch.no_grad()
def evaluate(fwd, model, data, device, batch, amp="off"):
    """(mean loss, accuracy) on the held-out images, BatchNorm in inference mode."""
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    for x, y in data.test_batches(batch):
        with harness.autocast(device, amp):
            logits, loss = fwd(x.to(device), y.to(device))
        total_loss += loss.item() * len(y)
        correct += int((logits.argmax(dim=1).cpu() == y).sum())
        seen += len(y)
    model.train()
    return total_loss / seen, correct / seen


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, steps=100, batch=32, width=8, depth=4)
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--train-images", type=int, default=2048)
    p.add_argument("--test-images", type=int, default=512)
    args = p.parse_args()

    data = ImageData(size=args.image_size, train=args.train_images, test=args.test_images,
                     seed=args.seed)
    harness.announce(args.device)
    print(f"ResNet-{2 + 4 * args.depth}-style ({args.depth} stages of 2 blocks, width "
          f"{args.width}), {args.image_size}x{args.image_size} images, {NUM_CLASSES} classes, "
          f"batch {args.batch}; device {args.device}, mode {args.mode}, amp {args.amp}")
    if args.check:
        return harness.check(lambda *a: train(args, data, *a), args)

    model, fwd, losses, times = train(args, data, args.device, args.mode, args.steps,
                                      quiet=args.quiet)
    rate, timed = harness.throughput(times, args.batch)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {args.steps} steps "
          f"(chance: {math.log(NUM_CLASSES):.4f})")
    print(f"first step {times[0]:.2f} s (includes compiling); "
          f"{rate:,.1f} images/s over the {timed} steps after it")
    start = time.perf_counter()
    loss, acc = evaluate(fwd, model, data, args.device, args.batch, args.amp)
    print(f"eval: loss {loss:.4f}, accuracy {100 * acc:.1f}% on {args.test_images} held-out "
          f"images (chance {100 / NUM_CLASSES:.0f}%), {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

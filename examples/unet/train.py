"""Train a small DDPM diffusion model (a UNet) on generated shape images, then
sample new images from it and save them beside the loss curve as a PNG.

    python examples/unet/train.py                        # Defer & Fuse on tpu
    python examples/unet/train.py --mode strict_eager --steps 200
    python examples/unet/train.py --mode compile         # torch.compile(backend="tpu")
    python examples/unet/train.py --device cpu           # PyTorch's CPU backend
    python examples/unet/train.py --check                # a few steps on tpu and CPU agree
    python examples/unet/train.py --out samples.png      # where the figure goes

A model that learned draws single discs, squares and triangles in clean colours
on a dark background (compare the training images in the figure's first row);
one that did not draws coloured noise.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402

from examples import harness  # noqa: E402
from examples.unet.data import ShapeData  # noqa: E402
from examples.unet.diffusion import Diffusion, sample  # noqa: E402
from examples.unet.model import UNet  # noqa: E402


def build(args, device):
    torch.manual_seed(args.seed)  # the same initial weights on every device
    unet = UNet(width=args.width, image=args.image_size, attn_res=args.attn_res)
    model = Diffusion(unet, steps=args.timesteps).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr or 2e-3, weight_decay=0.0)
    return model, opt


def train(args, data, device, mode, steps, quiet=False):
    g = torch.Generator().manual_seed(args.seed)  # the same images and noise on every device

    def next_batch():
        x0 = data.batch(args.batch, g)
        t = torch.randint(0, args.timesteps, (args.batch,), generator=g)
        return x0, t, torch.randn(x0.shape, generator=g)

    return harness.train_loop(lambda dev: build(args, dev), next_batch, device, mode, steps,
                              f"train {device} {mode}", quiet, args.amp)


def smooth(values, window):
    """Running mean over `window` steps (the raw diffusion loss is noisy)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def grid(images, rows):
    """[N, 3, H, W] in [-1, 1] -> one [rows*H, cols*W, 3] picture in [0, 1], 1-pixel gaps."""
    n, _, h, w = images.shape
    cols = (n + rows - 1) // rows
    canvas = torch.ones(rows * (h + 1) + 1, cols * (w + 1) + 1, 3)
    for k in range(n):
        r, c = divmod(k, cols)
        canvas[1 + r * (h + 1):1 + r * (h + 1) + h, 1 + c * (w + 1):1 + c * (w + 1) + w] = \
            (images[k].permute(1, 2, 0) + 1) / 2
    return canvas


def save_figure(path, losses, samples, real, title):
    """The loss curve on the left, training images (top row) and samples on the right."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    fig, (ax_loss, ax_img) = plt.subplots(1, 2, figsize=(11, 4.8),
                                          gridspec_kw=dict(width_ratios=[1, 1.1]))
    ax_loss.plot(losses, color="0.75", linewidth=0.8, label="per step")
    ax_loss.plot(smooth(losses, max(1, len(losses) // 20)), color="C0", label="running mean")
    ax_loss.set_yscale("log")
    ax_loss.set_xlabel("training step")
    ax_loss.set_ylabel("noise-prediction MSE")
    ax_loss.set_title("training loss")
    ax_loss.legend()
    cols = (len(samples) + 3) // 4
    ax_img.imshow(grid(torch.cat([real[:cols], samples]), rows=1 + (len(samples) + cols - 1) // cols).numpy(),
                  interpolation="nearest")
    ax_img.set_title("top row: training images; below: samples")
    ax_img.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, steps=600, batch=32, width=32)
    p.add_argument("--image-size", type=int, default=16)
    p.add_argument("--attn-res", type=int, default=8,
                   help="self-attention where the feature map is at most this wide")
    p.add_argument("--timesteps", type=int, default=200, help="diffusion steps")
    p.add_argument("--train-images", type=int, default=4096)
    p.add_argument("--samples", type=int, default=16, help="images to sample")
    p.add_argument("--out", default="unet_samples.png", help="the PNG to write")
    args = p.parse_args()
    if args.image_size % 4:
        p.error("--image-size must be a multiple of 4 (the UNet halves it twice)")

    data = ShapeData(size=args.image_size, train=args.train_images, seed=args.seed)
    harness.announce(args.device)
    print(f"DDPM UNet width {args.width}, {args.image_size}x{args.image_size} shape images, "
          f"{args.timesteps} diffusion steps, batch {args.batch}; device {args.device}, "
          f"mode {args.mode}, amp {args.amp}")
    if args.check:
        return harness.check(lambda *a: train(args, data, *a), args)

    model, _, losses, times = train(args, data, args.device, args.mode, args.steps,
                                    quiet=args.quiet)
    rate, timed = harness.throughput(times, args.batch)
    window = max(1, len(losses) // 10)
    first, last = sum(losses[:window]) / window, sum(losses[-window:]) / window
    print(f"loss {first:.4f} -> {last:.4f} (mean of the first and last {window} steps) "
          f"over {args.steps} steps")
    print(f"first step {times[0]:.2f} s (includes compiling); {rate:,.1f} images/s over the "
          f"{timed} steps after it")

    model.eval()
    unet = harness.compile_model(model.unet, args.device, args.mode)
    start = time.perf_counter()
    samples = sample(unet, model, args.samples, args.image_size, args.device,
                     torch.Generator().manual_seed(args.seed + 1),
                     lambda: harness.autocast(args.device, args.amp),
                     lambda: harness.end_step(args.device))
    print(f"sampled {args.samples} images ({args.timesteps} denoising steps) in "
          f"{time.perf_counter() - start:.1f} s")
    save_figure(args.out, losses, samples, data.images,
                f"DDPM on {args.device} ({args.mode}, amp {args.amp}): {args.steps} steps, "
                f"loss {first:.3f} -> {last:.3f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

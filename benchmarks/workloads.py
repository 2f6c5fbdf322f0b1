"""The benchmarked workloads: minGPT and the ResNet-18-style network from examples/,
each as a training step (forward, backward, AdamW), the same training step with the
forward under bfloat16 autocast (`train_bf16`: torch.autocast(device, torch.bfloat16),
the float32 weights and optimizer kept, as mixed-precision training on TPU runs) and
an inference step (forward under no_grad; ResNet's BatchNorm in eval mode). Every
step ends by reading the loss on the host, so a step's time covers its work,
whatever the execution mode.

Sizes per suite size: `full` is the default suite; `quick` shrinks the models so
that the suite finishes in about two minutes; `smoke` (for the tests) also cuts
ResNet to two one-block stages, since compiling convolutions dominates its time.
"""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

SIZES = {
    "full": dict(gpt=dict(layers=4, width=256, heads=4, context=128, batch=8, vocab=65),
                 resnet=dict(width=16, image=32, batch=32, blocks=(2, 2, 2, 2))),
    "quick": dict(gpt=dict(layers=2, width=64, heads=4, context=32, batch=8, vocab=65),
                  resnet=dict(width=8, image=16, batch=16, blocks=(2, 2, 2, 2))),
    "smoke": dict(gpt=dict(layers=1, width=32, heads=2, context=16, batch=2, vocab=65),
                  resnet=dict(width=4, image=8, batch=4, blocks=(1, 1))),
}
MODELS = ("mingpt", "resnet")
KINDS = ("train", "train_bf16", "infer")


def describe(model, size):
    s = SIZES[size]["gpt" if model == "mingpt" else "resnet"]
    if model == "mingpt":
        return (f"minGPT {s['layers']} layers x {s['width']}, context {s['context']}, "
                f"batch {s['batch']}")
    name = "ResNet-18-style" if s["blocks"] == (2, 2, 2, 2) else f"ResNet, blocks {s['blocks']},"
    return f"{name} width {s['width']}, {s['image']}x{s['image']} images, batch {s['batch']}"


def build(model, size, device):
    """(module, inputs, targets) on `device`, the same weights and data on every device."""
    import torch
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if model == "mingpt":
        from examples.mingpt.model import GPT, GPTConfig
        s = SIZES[size]["gpt"]
        net = GPT(GPTConfig(vocab_size=s["vocab"], block_size=s["context"],
                            n_layer=s["layers"], n_head=s["heads"], n_embd=s["width"]))
        x = torch.randint(0, s["vocab"], (s["batch"], s["context"]), generator=g)
        y = torch.randint(0, s["vocab"], (s["batch"], s["context"]), generator=g)
    else:
        from examples.resnet.data import NUM_CLASSES, make_images
        from examples.resnet.model import ResNet
        s = SIZES[size]["resnet"]
        net = ResNet(num_classes=NUM_CLASSES, width=s["width"], blocks=s["blocks"])
        x, y = make_images(s["batch"], s["image"], g)
    return net.to(device), x.to(device), y.to(device)


def make_step(net, x, y, kind, wrap=lambda m: m):
    """A step function returning the loss as a Python float. `wrap` is applied to the
    module (torch.compile in the compiled modes); the optimizer runs eagerly.
    A step ends when all of its device work has: reading the loss alone would let the
    optimizer update still run into the next timed step (or another process's)."""
    import torch
    fwd = wrap(net)
    sync = torch.tpu.synchronize if x.device.type == "tpu" else (lambda: None)
    if kind in ("train", "train_bf16"):
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        amp = dict(device_type=x.device.type, dtype=torch.bfloat16, enabled=kind == "train_bf16")

        def step():
            with torch.autocast(**amp):
                _, loss = fwd(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            value = loss.item()
            sync()
            return value
    else:
        net.eval()

        def step():
            with torch.no_grad():
                _, loss = fwd(x, y)
            value = loss.item()
            sync()
            return value
    return step

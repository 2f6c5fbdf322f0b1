"""Demo: train a small classifier on the tpu device and check it against the CPU.

Runs anywhere: the tpu device uses the CPU PJRT plugin unless TORCH_TPU_PLATFORM
says otherwise. The data is generated: points in four Gaussian clusters.

    python examples/train_mlp.py [--steps 200] [--optimizer adamw|sgd]
"""
import argparse
import time

import torch
import torch_tpu


def make_data(n, generator):
    centers = torch.tensor([[2.0, 2.0], [-2.0, 2.0], [-2.0, -2.0], [2.0, -2.0]])
    labels = torch.randint(0, 4, (n,), generator=generator)
    points = centers[labels] + 0.8 * torch.randn(n, 2, generator=generator)
    features = torch.cat([points, points.pow(2), points.prod(dim=1, keepdim=True)], dim=1)
    return features, labels


def train(device, steps, optimizer, log=True):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x, y = make_data(2048, g)
    x, y = x.to(device), y.to(device)
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4)).to(device)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == steps - 1:
            losses.append(loss.item())
            if log:
                print(f"  step {step:4d}  loss {losses[-1]:.4f}")
    elapsed = time.perf_counter() - start
    accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    return losses, accuracy, elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    args = p.parse_args()
    print(f"tpu device: {torch.tpu.get_device_name()} ({torch.tpu.device_count()} device(s))")
    losses, acc, secs = train("tpu", args.steps, args.optimizer)
    print(f"tpu: final loss {losses[-1]:.4f}, accuracy {acc:.3f}, {secs:.2f} s "
          f"({1000 * secs / args.steps:.2f} ms/step)")
    ref, ref_acc, ref_secs = train("cpu", args.steps, args.optimizer, log=False)
    print(f"cpu: final loss {ref[-1]:.4f}, accuracy {ref_acc:.3f}, {ref_secs:.2f} s")
    drift = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, ref))
    print(f"largest relative loss difference tpu vs cpu: {drift:.2e}")
    print(torch_tpu.debug.report())
    assert drift < 1e-3, "tpu and cpu training diverged"


if __name__ == "__main__":
    main()

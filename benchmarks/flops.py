"""FLOPs: what a step of a workload costs, and what the machine can do.

- `count_flops_of` / `count_step_flops`: PyTorch's FlopCounterMode over one step on the CPU. It counts
  matmuls, convolutions and attention (forward and, for training, backward): the
  work that dominates these models; elementwise ops and the optimizer are left out,
  so achieved FLOP/s are a slight underestimate.
- `matmul_peak`: the best FLOP/s of a large float32 matmul, timed on the device;
  the "% of peak" columns divide by it, so they read as a fraction of what this
  machine's matmul actually reaches, not of a datasheet number.
"""
import time


def count_flops_of(step):
    """Runs step() once under FlopCounterMode; its FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def count_step_flops(model, kind, size):
    """One float32 step of the workload on the CPU, counted. run_all uses it only for
    the steps no CPU eager float32 row counts (measure(count_flops=True)) as it runs."""
    from workloads import build, make_step
    net, x, y = build(model, size, "cpu")
    return count_flops_of(make_step(net, x, y, kind, model=model, size=size))


def matmul_peak(device, n, repeats=3):
    """FLOP/s of the best of `repeats` timed n x n x n float32 matmuls on `device`
    (after one untimed run that compiles and warms up)."""
    import torch
    sync = torch.tpu.synchronize if device == "tpu" else (lambda: None)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    (a @ b).sum().item()
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        c = a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    del c
    return 2 * n ** 3 / best

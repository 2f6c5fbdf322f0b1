"""Host time per cached small op in Strict Eager, beside PyTorch's CPU eager.

Each case runs a loop of one small op (programs already compiled by a warm-up),
then waits for the device. Two figures per op, in microseconds, median of several
repeats: wall time per op, and the calling thread's CPU time per op (what the host
spends issuing it: the dispatcher, the kernel, key and cache lookup, the launch;
not the device's work on PJRT's threads, nor time the thread was descheduled,
so it stays stable on a loaded machine). Run: python benchmarks/op_overhead.py [--iters N]

With JAX installed, a last row compares a registered JAX op (torch_tpu.kernels.jax_op,
differentiable, called with tensors that need no gradient) with the built-in op of
the same arity and work, add(a, b): the host CPU ratio is what a JAX op costs to call
in Strict Eager beyond a built-in op (target: within 1.5x).
"""
import argparse
import statistics
import time

import torch
import torch_tpu


def ops(a, b, m):
    """(short name, label, call) of each op measured here and counted by
    benchmarks/callgrind_ops.py, on a, b (64 floats) and m (16 x 16). "slice + add"
    is two dispatcher calls (a view, then an add with a wrapped scalar), timed together."""
    return [
        ("add", "add(a, b)", lambda: torch.add(a, b)),
        ("mul", "mul(a, 0.5)", lambda: a * 0.5),
        ("add_", "a.add_(b, alpha=2)", lambda: a.add_(b, alpha=2.0)),
        ("relu", "relu(a)", lambda: torch.relu(a)),
        ("sum", "sum(a)", lambda: a.sum()),
        ("mm", "mm(m, m)", lambda: m @ m),
        ("view", "view (metadata only)", lambda: m.view(256)),
        ("slice_add", "slice + add", lambda: m[2:10] + 1.0),
    ]


def cases(device, key=1):
    """label (key=1) or short name (key=0) -> the op's call, on fresh inputs on `device`."""
    a = torch.randn(64, device=device)
    b = torch.randn(64, device=device)
    m = torch.randn(16, 16, device=device)
    return {row[key]: row[2] for row in ops(a, b, m)}


def sync(device):
    if device == "tpu":
        torch.tpu.synchronize()


def measure(fn, device, iters, repeats):
    for _ in range(20):
        fn()
    sync(device)
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        for _ in range(iters):
            fn()
        cpu.append((time.thread_time() - start_cpu) / iters * 1e6)
        sync(device)
        times.append((time.perf_counter() - start) / iters * 1e6)
    return statistics.median(times), statistics.median(cpu)


def jax_op_row(iters, repeats):
    """(jax op (wall, host CPU), add (wall, host CPU)), or None without JAX. The two
    alternate, so that load on a shared machine falls on both alike."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    from torch_tpu.kernels import jax_op

    @jax_op("op_overhead::add")
    def jax_add(x, y):
        return x + y

    a, b = torch.randn(64, device="tpu"), torch.randn(64, device="tpu")
    runs = {"jax": [], "add": []}
    for _ in range(repeats):
        runs["jax"].append(measure(lambda: jax_add(a, b), "tpu", iters, 1))
        runs["add"].append(measure(lambda: torch.add(a, b), "tpu", iters, 1))
    return tuple(tuple(statistics.median(r[i] for r in runs[k]) for i in (0, 1))
                 for k in ("jax", "add"))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--iters", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    tpu_cases, cpu_cases = cases("tpu"), cases("cpu")
    compiled_before = torch_tpu.debug.metrics()["programs_compiled"]
    rows = []
    for name in tpu_cases:
        t = measure(tpu_cases[name], "tpu", args.iters, args.repeats)
        c = measure(cpu_cases[name], "cpu", args.iters, args.repeats)
        rows.append((name, t, c))
    jax_row = jax_op_row(args.iters, args.repeats)
    compiled = torch_tpu.debug.metrics()["programs_compiled"] - compiled_before
    print(f"platform: {torch.tpu.get_device_name()}; median of {args.repeats} x {args.iters} calls")
    print(f"{'op':24s} {'tpu wall (us)':>14s} {'tpu host CPU (us)':>18s} "
          f"{'cpu eager wall (us)':>20s} {'wall ratio':>10s}")
    for name, (t, tc), (c, _) in rows:
        print(f"{name:24s} {t:14.1f} {tc:18.1f} {c:20.1f} {t / c:10.1f}")
    if jax_row is None:
        print("jax_op row: JAX is not installed")
    else:
        (jw, jc), (aw, ac) = jax_row
        print(f"{'jax_op add(a, b)':24s} {jw:14.1f} {jc:18.1f} {'':>20s} "
              f"{'':>10s}  host CPU {jc / ac:.2f}x add(a, b)'s {ac:.1f} us "
              f"(wall {jw / aw:.2f}x)")
    print(f"programs compiled during the benchmark (warm-up included): {compiled}")


if __name__ == "__main__":
    main()

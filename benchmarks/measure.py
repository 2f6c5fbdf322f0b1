"""One benchmark row, measured in the current process: a workload (one of the six
models, training, inference or decode step) in one mode and precision (float32, or
bfloat16 autocast). run_all.py runs this in child processes.

Modes: strict_eager, defer_and_fuse, compiled (torch.compile(backend="tpu")) on the
`tpu` device; cpu_eager and cpu_inductor (torch.compile's default backend) on PyTorch's
CPU backend.
"""
import gc
import statistics
import time

TPU_MODES = ("strict_eager", "defer_and_fuse", "compiled")
CPU_MODES = ("cpu_eager", "cpu_inductor")
MODES = TPU_MODES + CPU_MODES


def _reason(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def measure(model, kind, mode, size, steps, warmup, precision="fp32", count_flops=False):
    """A dict of the row's numbers, or {"error": reason} when the mode cannot run it.
    `count_flops`: the last warm-up step (untimed; an extra one when there is only the
    first) runs under PyTorch's FlopCounterMode and the row gets `flops_per_step`: the
    CPU eager float32 row counts its step's FLOPs this way instead of run_all building
    the model again for a step of its own (flops.py)."""
    import torch

    import torch_tpu
    from flops import count_flops_of
    from workloads import build, items_per_step, make_step
    on_tpu = mode in TPU_MODES
    device = "tpu" if on_tpu else "cpu"
    # Rows that share a process must not see each other's Dynamo graphs or tensors.
    torch._dynamo.reset()
    gc.collect()
    # What is alive now stays alive (torch, transformers, Dynamo: ~580k objects once
    # imported): gc.freeze() takes it out of the collector's view, so that this
    # row's collections scan only what the row allocates. Each full collection
    # rescanned them all: measured at load ~9, 1.5 s of a 5 s (CPU) Strict Eager
    # minGPT row and 1.2 s of the Llama decode row, nearly all of it this
    # collect() of the row before.
    gc.freeze()
    torch_tpu.set_execution_mode("defer_and_fuse" if mode == "defer_and_fuse"
                                 else "strict_eager")
    if on_tpu:
        torch.tpu.synchronize()
        torch.tpu.reset_peak_memory_stats()
    before = torch_tpu.debug.metrics()
    wrap = lambda m: m  # noqa: E731
    if mode in ("compiled", "cpu_inductor"):
        backend = "tpu" if on_tpu else "inductor"
        wrap = lambda m: torch.compile(m, backend=backend)  # noqa: E731
    try:
        net, x, y = build(model, size, device)
        step = make_step(net, x, y, kind, wrap, amp="bf16" if precision == "bf16" else "none",
                         model=model, size=size)
        start = time.perf_counter()
        step()
        first = time.perf_counter() - start
        untimed = max(warmup - 1, int(count_flops))
        for i in range(untimed):
            if count_flops and i == untimed - 1:
                try:
                    flops = count_flops_of(step)
                except Exception:  # the row is still worth measuring without its FLOP count
                    flops = None
                    step()
            else:
                step()
        warm = torch_tpu.debug.metrics()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - start)
    except Exception as e:  # a mode that cannot run a workload is a row, not a crash
        return dict(error=_reason(e))
    after = torch_tpu.debug.metrics()
    items, unit = items_per_step(model, kind, size)
    median = statistics.median(times)
    row = dict(median_s=median, first_s=first, loss=loss, steps=steps, warmup=warmup,
               device=device, throughput=items / median, throughput_unit=f"{unit}/s")
    if count_flops and flops:
        row["flops_per_step"] = flops
    if on_tpu:
        row.update(
            compiles=after["programs_compiled"] - before["programs_compiled"],
            compiles_after_warmup=after["programs_compiled"] - warm["programs_compiled"],
            disk_cache_hits=after.get("disk_hits", 0) - before.get("disk_hits", 0),
            compile_s=after["compile_seconds"] - before["compile_seconds"],
            cpu_fallback_ops=after["cpu_fallback_ops"] - before["cpu_fallback_ops"],
            peak_mib=torch.tpu.max_memory_allocated() / 2 ** 20)
    elif mode == "cpu_inductor":
        from torch._dynamo.utils import counters
        row["compiles"] = counters["stats"]["unique_graphs"]
    del net, x, y, step
    return row

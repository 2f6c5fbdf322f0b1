"""Host time of one compiled (torch.compile(model, backend="tpu")) forward+backward call
of the GPT, and where it goes: ours (the CompiledTrace calls of the forward and the
backward graph: binding buffers, the launch, wrapping results) against PyTorch's own
(Dynamo's guards, the autograd.Function around the graphs: the backend's lean one for
a plain training graph, else AOTAutograd's with its runtime wrappers, and the autograd
engine's hand-over to the device thread). TORCH_TPU_COMPILE_LEAN=0 measures AOTAutograd's
full run-time. A script, not a test.

    python benchmarks/compiled_host.py [--steps 30] [--layers 4 --width 256 --context 128 --batch 8]
    python benchmarks/compiled_host.py --host-only   # the same graphs at a size that computes ~nothing

The first figure is the plain one (wall, from the call to backward's return, programs
launched and not awaited; the device was idle at the call). On the CPU plugin the device
is this machine's cores: the forward program runs while the backward is launched, so
the wall figure includes waiting for a core. Thread CPU times do not, and are the
stable parts of the breakdown.

Even thread CPU times rise while the programs run: the two threads share the cores'
caches and, on SMT, the cores themselves (by ~2.5x on a 2-core machine). --host-only
keeps the layer and head-count structure, so the graphs have the same inputs, saved
activations, outputs and nodes, but makes every tensor tiny (width 2 per head,
context 8, batch 1): the programs then take microseconds and the figures are the host
path alone, as it would be beside an accelerator that does not run on the host's cores.
"""
import argparse
import os
import statistics
import sys
import time

import gpt_bench  # (this script's directory is on sys.path)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    gpt_bench.add_size_args(p)
    p.add_argument("--host-only", action="store_true",
                   help="the same graphs with tiny tensors: the host path without the "
                        "device's work on the same cores (see above)")
    args = p.parse_args()
    if args.host_only:
        args.width, args.context, args.batch = 2 * args.heads, 8, 1

    import torch
    import torch_tpu
    from torch_tpu.dynamo import graph_runner

    torch_tpu.set_execution_mode("strict_eager")
    model, x, y = gpt_bench.tpu_gpt_and_batch(args)

    # Time stamps (wall, this thread's CPU) of the steps of one call; our graph calls
    # are timed by wrapping CompiledGraph.__call__ (the backward's runs on autograd's
    # device thread, so its CPU times are that thread's).
    ev = {}

    def mark(k):
        ev.setdefault(k, (time.perf_counter(), time.thread_time()))

    call = graph_runner.CompiledGraph.__call__

    def timed(self, a):
        mark(self.record.kind + "_in")
        r = call(self, a)
        mark(self.record.kind + "_out")
        return r

    graph_runner.CompiledGraph.__call__ = timed
    compiled = torch.compile(model, backend="tpu")
    rows = []
    for i in range(args.warmup + args.steps):
        torch.tpu.synchronize()
        ev.clear()
        mark("call")
        _, loss = compiled(x, y)
        mark("forward_return")
        loss.register_hook(lambda g: mark("backward_start") and None)  # on the device thread
        mark("backward_call")
        loss.backward()
        mark("backward_return")
        runtime = ("lean" if type(loss.grad_fn).__name__ == "_LeanFunctionBackward"
                   else "AOTAutograd")
        model.zero_grad(set_to_none=True)
        if i >= args.warmup:
            rows.append(dict(ev))
    graph_runner.CompiledGraph.__call__ = call

    def span(a, b, cpu=False):
        return statistics.median(r[b][cpu] - r[a][cpu] for r in rows) * 1e3

    print(f"run-time around the graphs: {runtime}")
    print(f"{'compiled fwd+bwd host time':34s} {span('call', 'backward_return'):8.3f} ms "
          f"(wall, call to backward's return)")
    print(f"{'forward call':34s} {span('call', 'forward_return', True):8.3f} ms "
          f"(this thread's CPU time)")
    ours_f = span("forward_in", "forward_out", True)
    print(f"{'  ours: forward graph call':34s} {ours_f:8.3f} ms")
    print(f"{'  PyTorch: Dynamo+Function around':34s} "
          f"{span('call', 'forward_return', True) - ours_f:8.3f} ms")
    guard = guard_time(model, x, y)
    if guard is not None:
        print(f"{'    of which Dynamo guard eval':34s} {guard:8.3f} ms (the frame's guards alone)")
    ours_b = span("backward_in", "backward_out", True)
    print(f"{'backward (device thread)':34s}")
    print(f"{'  ours: backward graph call':34s} {ours_b:8.3f} ms (that thread's CPU time)")
    print(f"{'  PyTorch: backward prologue':34s} {span('backward_start', 'backward_in'):8.3f} ms "
          f"(wall: grad hook to our call)")
    print(f"{'  PyTorch: call to device thread':34s} {span('backward_call', 'backward_start'):8.3f} ms "
          f"(wall: backward() to the first hook, incl. ones_like(loss))")
    print(f"{'  rest: epilogue, grads, return':34s} {span('backward_out', 'backward_return'):8.3f} ms (wall)")
    for g in torch_tpu.debug.compiled_graphs():
        print(f"  {g['kind']:9s} graph: {g['nodes']} nodes, {g['calls']} calls, "
              f"{g['direct_calls']} direct, why recorded: {g['why_recorded']}")


def guard_time(model, x, y, n=200):
    """Median time of one evaluation of the compiled frame's Dynamo guards (ms)."""
    import torch
    try:
        entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(
            type(model).forward.__code__)
    except AttributeError:
        return None
    if not entries:
        return None
    gm = entries[0].guard_manager
    frame = {"self": model, "idx": x, "targets": y}
    if not gm.check(frame):
        return None
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(n):
        gm.check(frame)
    print(f"    (guards: {(time.perf_counter() - w0) / n * 1e6:.1f} us wall per check)")
    return (time.thread_time() - c0) / n * 1e3


if __name__ == "__main__":
    main()

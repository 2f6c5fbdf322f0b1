"""Instructions of one compiled GPT forward+backward call, by thread and by owner,
counted by callgrind: the host path of compiled_host.py --host-only, in a figure that
holds on a loaded machine, where its timings do not. A script, not a test.

    python benchmarks/callgrind_compiled.py [--steps 10] [--layers 4 --heads 4]

torch.compile(model, backend="tpu") of the GPT at compiled_host.py's host-only size
(the layer and head structure kept, every tensor tiny, so the programs compute next to
nothing). The script runs itself under `valgrind --tool=callgrind` with
instrumentation off, warms up, and switches it on (a client request from a small C
helper compiled here) from each call of the compiled model to the return of
loss.backward(); zero_grad runs with it off. It prints instructions per call for
the calling thread and for autograd's device thread (where the backward graph runs),
each split three ways from inclusive costs:

  plugin   every PJRT_* entry point the PJRT plugin serves (the launches, buffer
           destruction), wherever it is called from;
  ours     the compiled graphs' calls (CompiledTraceSet.__call__: argument conversion,
           binding, result tensors) and the storage deleter, less the plugin in them;
  PyTorch  the rest: Python, Dynamo's frame and guards, the autograd.Function around
           the graphs, the autograd engine (its per-node thread-local state, input
           validation, AccumulateGrad), tensor frees outside our deleter.

The plugin's largest parts (callgrind_ops.PLUGIN_PARTS) and the top entries of
PyTorch's share are listed too. The plugin's worker threads (its asynchronous
dispatch and the programs' execution) are summed on one line, with the part spent
in XLA's thunk executor; most of the rest is its thread pool's spinning. XLA's CPU
code is limited to AVX2 (valgrind decodes no AVX-512) and the persistent cache is
off. Needs valgrind, its headers and a C compiler; `callgrind_annotate
--inclusive=yes <out file>` shows more.
"""
import argparse
import ctypes
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import gpt_bench  # noqa: E402
from callgrind_ops import (PLUGIN_PARTS, build_toggle, inclusive_costs, named,  # noqa: E402
                           plugin_share, run_callgrind)

# Zeroed once, switched on and off around each counted call, dumped at the end.
HELPER = r"""
#include <valgrind/callgrind.h>
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_on(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_dump(void) { CALLGRIND_DUMP_STATS; }
"""

# PyTorch-side entries worth naming in the listing (inclusive costs).
NAMED = (
    ("autograd engine: per-node thread-local state", "at::ThreadLocalState::setThreadLocalState("),
    ("autograd engine: AccumulateGrad", "torch::autograd::AccumulateGrad::apply("),
    ("autograd engine: validate_outputs", "torch::autograd::validate_outputs("),
    ("autograd.Function apply (incl. the forward graph call)", "THPFunction_apply("),
    ("saved activations released", "torch::autograd::PyNode::release_variables("),
    ("Dynamo guards", "torch::dynamo::run_root_guard_manager("),
)


def child(args):
    import torch
    import torch_tpu

    cg = ctypes.CDLL(args.helper)
    torch_tpu.set_execution_mode("strict_eager")
    model, x, y = gpt_bench.tpu_gpt_and_batch(args)
    compiled = torch.compile(model, backend="tpu")

    def step(counted):
        if counted:
            cg.cg_on()
        _, loss = compiled(x, y)
        loss.backward()
        if counted:
            cg.cg_off()
        model.zero_grad(set_to_none=True)

    for _ in range(5):  # warm: both graphs captured, their programs compiled
        step(False)
    torch.tpu.synchronize()
    cg.cg_zero()
    for _ in range(args.steps):
        step(True)
    torch.tpu.synchronize()
    cg.cg_dump()


def split(incl, total):
    """(plugin, ours, PyTorch) from a thread's inclusive costs."""
    plugin = plugin_share(incl)
    ours = sum(v for k, v in incl.items()
               if "CompiledTraceSet::call(" in k or "delete_slot(void*)" in k)
    # the plugin's calls inside ours (launches, the frees in the deleter) are the
    # plugin's; the few outside (none on the hot path) would be counted twice
    return plugin, max(ours - plugin, 0), total - max(ours, plugin)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    defaults = dict(gpt_bench.SIZE_FLAGS)
    p.add_argument("--layers", type=int, default=defaults["layers"])
    p.add_argument("--heads", type=int, default=defaults["heads"])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--helper", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.width, args.context, args.batch = 2 * args.heads, 8, 1  # compiled_host's host-only size
    if args.child:
        return child(args)
    work = tempfile.mkdtemp(prefix="callgrind_compiled_")
    lib = build_toggle(work, HELPER)
    out = os.path.join(work, "cg.out")
    print(f"compiled GPT fwd+bwd, {args.layers} layers x {args.heads} heads at the host-only "
          f"size, {args.steps} counted calls; outputs in {work}")
    run_callgrind(out, [os.path.abspath(__file__), "--child", "--steps", str(args.steps),
                        "--helper", lib, "--layers", str(args.layers), "--heads", str(args.heads)])
    workers = thunks = 0
    for path in sorted(glob.glob(out + "*")):
        incl, total = inclusive_costs(path)
        if total == 0:
            continue
        # the calling thread runs the forward's Function (and the engine's CPU queue)
        if any("THPFunction_apply(" in k for k in incl):
            name = "calling thread"
        elif any("Engine::thread_main(" in k for k in incl):
            name = "autograd device thread"
        else:
            workers += total
            thunks += max((v for k, v in incl.items()
                           if k.startswith("xla::cpu::ThunkExecutor::Execute(") and "'" not in k),
                          default=0)
            continue
        plugin, ours, rest = split(incl, total)
        n = args.steps
        print(f"{name:24s} {total / n:10.0f} instructions per call   ({path})")
        print(f"{'':24s}   plugin {plugin / n:9.0f}   ours {ours / n:9.0f}   PyTorch {rest / n:9.0f}")
        for label, v in named(incl, PLUGIN_PARTS + NAMED):
            print(f"{'':24s}     {label:56s} {v / n:9.0f}")
    print(f"{'plugin worker threads':24s} {workers / args.steps:10.0f} instructions per call, "
          f"{thunks / args.steps:.0f} of them running the programs' thunks (the rest is "
          f"its thread pool looking for work)")


if __name__ == "__main__":
    main()

"""Instructions per warm cached op, counted by callgrind: stable on a loaded machine,
where timings are not. A script, not a test.

    python benchmarks/callgrind_ops.py [--ops add,mm] [--n 200] [--mode strict_eager|defer_and_fuse]
                                       [--breakdown]

Runs itself under `valgrind --tool=callgrind` with instrumentation off, switches it
on (a client request from a small C helper compiled here) around N calls of each op
after a warm-up, and prints the calling thread's instructions per op (Python,
dispatcher, our kernel, PJRT's launch). In Defer & Fuse the ops are recorded into
one pending graph and flushed outside the counted loop. XLA's CPU code is limited
to AVX2 (valgrind decodes no AVX-512) and the persistent cache is off, so the
programs run here are compiled for this run. Needs valgrind, its headers and a C
compiler; `callgrind_annotate --inclusive=yes <out file>` shows where they go.
--breakdown splits each figure three ways, from inclusive costs: the PJRT
plugin (every PJRT_* entry point it serves: the launch, buffer destruction
...), our kernel (op_kernel and the storage deleter, less the plugin calls in
them; includes the PyTorch tensor creation and allocations our code asks for),
and the rest: Python, the Python binding, the dispatcher and autograd. It also
names the plugin's largest parts (PLUGIN_PARTS): its launch, the placeholder it
creates on every launch for each constant and thread-local buffer allocation of
the program, and buffer destruction.
"""
import argparse
import collections
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile

HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
"""


def child(args):
    import torch
    import torch_tpu

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from op_overhead import cases  # the one op table, shared with op_overhead.py

    cg = ctypes.CDLL(args.helper)
    torch_tpu.set_execution_mode(args.mode)
    fn = cases("tpu", key=0)[args.child]
    if args.mode == "strict_eager":
        for _ in range(50):  # warm: the op's program compiled
            fn()
        torch.tpu.synchronize()
        cg.cg_start()
        for _ in range(args.n):
            fn()  # each call frees the previous result, as a loop does
        cg.cg_stop()
        torch.tpu.synchronize()
        return
    keep = []
    for _ in range(4):  # warm: the fused graph of n such ops compiled
        for _ in range(args.n):
            keep.append(fn())
        torch.tpu.synchronize()
        keep.clear()
    cg.cg_start()
    for _ in range(args.n):
        keep.append(fn())  # results stay alive: n nodes of one pending graph
    cg.cg_stop()
    torch.tpu.synchronize()


def inclusive_costs(out_file):
    """({function: inclusive instructions}, program total) of one callgrind dump
    (callgrind_compiled.py reads its dumps with this too)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file],
                          capture_output=True, text=True).stdout
    incl = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+\S*?:(.*)$", line)
        if m:
            incl[m.group(2)] += int(m.group(1).replace(",", ""))
    total = re.search(r"([\d,]+) \([^)]*\)\s+PROGRAM TOTALS", text)
    return incl, int(total.group(1).replace(",", "")) if total else 0


def build_toggle(work, source=HELPER):
    """Compiles the C helper whose client requests switch callgrind on and off
    (`source`: its functions) in `work`; returns the library's path."""
    src, lib = os.path.join(work, "toggle.c"), os.path.join(work, "libtoggle.so")
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


def run_callgrind(out, argv):
    """Runs `python argv...` under callgrind with instrumentation off until the
    child's helper switches it on, one dump per thread under `out`. XLA's CPU code
    is limited to AVX2 (valgrind decodes no AVX-512) and the persistent cache is off."""
    env = dict(os.environ, TORCH_TPU_CACHE="0", XLA_FLAGS="--xla_cpu_max_isa=AVX2")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                    f"--callgrind-out-file={out}", sys.executable, *argv],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# The PJRT plugin's parts worth naming (inclusive costs; callgrind_compiled.py lists
# them too). XLA's CPU client makes a placeholder for each constant and each
# thread-local allocation (the parameters and root of every reduction's region) of
# the program on every launch, an aligned allocation each: a cost per launch that
# grows with the program's reductions, not with its work.
PLUGIN_PARTS = (
    ("plugin: launches", "pjrt::PJRT_LoadedExecutable_Execute("),
    ("plugin:   of which allocation placeholders", "xla::CpuDeviceMemory::CreateConstantMemory("),
    ("plugin: buffer destruction", "pjrt::PJRT_Buffer_Destroy("),
)


def named(incl, parts):
    """[(label, inclusive instructions)] of the entries in `parts` ((label, name
    prefix) pairs) found in a dump's inclusive costs; recursive copies ("'2") skipped."""
    out = []
    for label, prefix in parts:
        v = max((v for k, v in incl.items() if prefix in k and "'" not in k), default=0)
        if v:
            out.append((label, v))
    return out


def plugin_share(incl):
    """The PJRT plugin's instructions in a dump's inclusive costs: every PJRT_* entry
    point it serves, wherever it is called from (callgrind_compiled.py splits with
    this too)."""
    return sum(v for k, v in incl.items() if k.startswith("pjrt::PJRT_"))


def breakdown(incl, n):
    """(plugin, ours) instructions per op from a dump's inclusive costs."""
    plugin = plugin_share(incl)
    kernel = sum(v for k, v in incl.items()
                 if k.startswith("tpu::aten::op_kernel(") or "delete_slot(void*)" in k)
    return plugin / n, (kernel - plugin) / n


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ops", default="add,mm")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--mode", default="strict_eager", choices=["strict_eager", "defer_and_fuse"])
    p.add_argument("--breakdown", action="store_true",
                   help="split each figure: PJRT plugin / our kernel / Python+PyTorch")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--helper", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    work = tempfile.mkdtemp(prefix="callgrind_ops_")
    lib = build_toggle(work)
    print(f"mode {args.mode}, {args.n} warm calls per op; outputs in {work}")
    for op in args.ops.split(","):
        out = os.path.join(work, f"cg.{op}.out")
        run_callgrind(out, [os.path.abspath(__file__), "--child", op, "--n", str(args.n),
                            "--mode", args.mode, "--helper", lib])
        dumps = sorted(glob.glob(out + ".1-01"))  # the client request's dump, calling thread
        incl, total = inclusive_costs(dumps[0])
        print(f"{op:10s} {total / args.n:10.0f} instructions per op   ({dumps[0]})")
        if args.breakdown:
            plugin, ours = breakdown(incl, args.n)
            rest = total / args.n - plugin - ours
            print(f"{'':10s}   plugin {plugin:8.0f}   ours {ours:8.0f}   "
                  f"Python+PyTorch {rest:8.0f}")
            for label, v in named(incl, PLUGIN_PARTS):
                print(f"{'':10s}     {label:56s} {v / args.n:8.0f}")


if __name__ == "__main__":
    main()

"""Our compiled GPT step's XLA programs against torch_xla's, run on one compiler.

peers.py compares whole steps, but each framework there brings its own XLA (our CPU
plugin's, torch_xla 2.9's, jaxlib's), so a difference in a step's time can be the
compiler's as well as the program's. This script takes the programs themselves, ours
(StableHLO, TORCH_TPU_DUMP_DIR) and torch_xla's (HLO protos, XLA_FLAGS=--xla_dump_to),
from one `torch.compile` training step of each (peers.py's compiled and xla_compiled
modes), and runs them all on jaxlib's CPU client, in interleaved rounds, on the same
inputs' shapes (floats ~N(0, 0.02), integers 0). A difference left is the program's.

    python benchmarks/peers.py --setup         # once: the JAX and torch_xla venvs
    python benchmarks/same_compiler.py [--kind train|infer] [--rounds 20] [--peers-dir .peers]

Programs are grouped by what they hold: the GPT's forward has 6 products per layer and
the head's, its backward twice as many, and programs without a product (the optimizer
step, the first step's state set-up, constants) are listed one by one with their
parameter count; the optimizer's is the one with four tensors per parameter.

Last, the same forward and backward programs of ours as torch_tpu runs them, on the
CPU plugin's XLA (the xla-cpu-pjrt wheel): each compiled graph called again on the
inputs of a training step, synchronised, in this venv. Against the jaxlib rows this
is one program on two compilers (another XLA version and its defaults: jaxlib puts
the products in YNNPACK fusions, the plugin runs them through Eigen); it runs in its
own process, so it is not interleaved with them. --no-plugin skips it.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import gpt_bench  # (this script's directory is on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_DIR = os.path.join(ROOT, ".peers")


# ------------------------------------------------------------ dumping (our venv)

def dump(args, tmp):
    """One compiled step of each framework, its programs written under tmp/ours and
    tmp/torch_xla."""
    ours, theirs = os.path.join(tmp, "ours"), os.path.join(tmp, "torch_xla")
    base = [sys.executable, os.path.join(HERE, "peers.py"), "--peers-dir", args.peers_dir,
            "--kinds", args.kind, "--steps", "1", "--warmup", "1", "--out",
            os.path.join(tmp, "steps")]
    size = gpt_bench.size_argv(args)
    for mode, env in (("compiled", {"TORCH_TPU_DUMP_DIR": ours}),
                      ("xla_compiled", {"XLA_FLAGS": f"--xla_dump_to={theirs} "
                                                     "--xla_dump_hlo_as_proto"})):
        subprocess.run(base + size + ["--modes", mode], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, **env})
    return ours, theirs


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kind", choices=("train", "infer"), default="train",
                   help="peers.py's training step or its inference step (the forward alone)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--peers-dir", default=PEERS_DIR)
    p.add_argument("--no-plugin", action="store_true",
                   help="skip timing our programs on torch_tpu's own CPU plugin")
    gpt_bench.add_size_args(p)
    p.add_argument("--time", nargs=3, metavar=("OURS", "THEIRS", "LAYERS"),
                   help=argparse.SUPPRESS)  # the timing child, in the JAX venv
    args = p.parse_args()
    if args.time:
        return time_programs(*args.time[:2], int(args.time[2]), args.rounds)
    jax_python = os.path.join(args.peers_dir, "jax", "bin", "python")
    if not os.path.exists(jax_python):
        p.error(f"no {jax_python}: run benchmarks/peers.py --setup first")
    with tempfile.TemporaryDirectory(prefix="torch_tpu_same_compiler_") as tmp:
        ours, theirs = dump(args, tmp)
        subprocess.run([jax_python, os.path.abspath(__file__), "--rounds", str(args.rounds),
                        "--time", ours, theirs, str(args.layers)], check=True)
    if not args.no_plugin and args.kind == "train":
        plugin_times(args)


# ------------------------------------------------------------ our plugin (our venv)

def plugin_times(args):
    """Our compiled GPT's forward and backward programs as torch_tpu runs them: each
    graph's call repeated on the inputs it had in a training step, synchronised."""
    sys.path.insert(0, ROOT)  # examples/ (the GPT) and this checkout's torch_tpu
    import torch
    import torch_tpu  # noqa: F401  (the tpu device)
    from torch_tpu.dynamo import graph_runner

    model, x, y = gpt_bench.tpu_gpt_and_batch(args)
    compiled = torch.compile(model, backend="tpu")
    seen = {}
    call = graph_runner.CompiledGraph.__call__

    def keep(self, a):  # the graph and a copy of its argument list (the call empties it)
        seen[self.record.kind] = (self, tuple(a))
        return call(self, a)

    graph_runner.CompiledGraph.__call__ = keep
    try:
        for _ in range(3):  # compiled, then called directly
            _, loss = compiled(x, y)
            loss.backward()
            model.zero_grad(set_to_none=True)
    finally:
        graph_runner.CompiledGraph.__call__ = call
    ms = {}
    for _ in range(3 + args.rounds):
        for kind in ("forward", "backward"):
            graph, a = seen[kind]
            torch.tpu.synchronize()
            t = time.perf_counter()
            out = graph(list(a))
            torch.tpu.synchronize()
            ms.setdefault(kind, []).append((time.perf_counter() - t) * 1e3)
            del out
    print(f"\ntorch_tpu's CPU plugin (xla-cpu-pjrt), our programs; median of {args.rounds} "
          "rounds after 3\n")
    print("| program | ours ms |")
    print("|---|---:|")
    for kind in ("forward", "backward"):
        print(f"| {kind} | {statistics.median(ms[kind][3:]):.2f} |")


# ------------------------------------------------------------ timing (JAX venv)

def hlo_module_of(hlo_proto):
    """The HloModuleProto inside an HloProto (field 1), as --xla_dump_hlo_as_proto writes."""
    assert hlo_proto[0] == 0x0A, "not an HloProto"
    n = shift = 0
    i = 1
    while True:
        byte = hlo_proto[i]
        n |= (byte & 0x7F) << shift
        shift += 7
        i += 1
        if not byte & 0x80:
            return hlo_proto[i:i + n]


def load(path):
    """(program for compile_and_load, [(shape, numpy dtype)] of its parameters, products)."""
    import numpy as np
    from jax._src.lib import _jax, xla_client
    if path.endswith(".pb"):
        module = hlo_module_of(open(path, "rb").read())
        comp = xla_client.XlaComputation(module)
        params = [(tuple(s.dimensions()), np.dtype(s.numpy_dtype()))
                  for s in comp.program_shape().parameter_shapes()]
        return _jax.mlir.hlo_to_stablehlo(module), params, comp.as_hlo_text().count(" dot(")
    text = open(path).read()
    signature = re.search(r"func\.func public @main\((.*?)\) ->", text, re.S).group(1)
    dtypes = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64,
              "i32": np.int32, "i1": np.bool_, "ui8": np.uint8}
    params = []
    for t in re.findall(r"tensor<([^>]*)>", signature):
        *dims, elem = t.split("x")
        params.append((tuple(int(d) for d in dims), np.dtype(dtypes[elem])))
    return text, params, text.count('"stablehlo.dot_general"')


def time_programs(ours, theirs, layers, rounds):
    import jax
    jax.config.update("jax_enable_x64", True)  # int64 parameters stay int64
    import numpy as np
    from jax._src import xla_bridge
    from jax._src.lib import xla_client
    backend = xla_bridge.get_backend("cpu")
    dev = backend.local_devices()[0]
    rng = np.random.default_rng(0)
    progs = []
    for who, folder, pattern in (("ours", ours, r"\.mlir$"),
                                 ("torch_xla", theirs, r"before_optimizations\.hlo\.pb$")):
        for name in sorted(os.listdir(folder)):
            if not re.search(pattern, name):
                continue
            code, params, dots = load(os.path.join(folder, name))
            exe = backend.compile_and_load(code, xla_client.DeviceList((dev,)),
                                           xla_client.CompileOptions())
            host = [(rng.standard_normal(s) * 0.02).astype(d) if d.kind == "f" else np.zeros(s, d)
                    for s, d in params]
            progs.append(dict(who=who, name=name, exe=exe, host=host, dots=dots, ms=[]))
    warmup = 3
    for r in range(warmup + rounds):
        for pr in progs:
            bufs = jax.block_until_ready([jax.device_put(v, dev) for v in pr["host"]])
            t = time.perf_counter()  # inputs are on the device; donation consumes them
            jax.block_until_ready(pr["exe"].execute_sharded(bufs)
                                  .disassemble_into_single_device_arrays())
            if r >= warmup:
                pr["ms"].append((time.perf_counter() - t) * 1e3)
    kinds = {6 * layers + 1: "forward", 12 * layers + 2: "backward"}
    print(f"jaxlib {jax.__version__} CPU client, {os.cpu_count()} CPUs; median of {rounds} "
          f"interleaved rounds after {warmup}\n")
    print("| program | products | parameters | ours ms | torch_xla ms |")
    print("|---|---:|---:|---:|---:|")
    for kind in ("forward", "backward"):
        cell = {pr["who"]: pr for pr in progs if kinds.get(pr["dots"]) == kind}
        if not cell:  # the inference step has no backward
            continue
        row = [f"{statistics.median(cell[w]['ms']):.2f}" if w in cell else "-"
               for w in ("ours", "torch_xla")]
        n = next(iter(cell.values()))["dots"]
        params = "/".join(str(len(cell[w]["host"])) for w in ("ours", "torch_xla") if w in cell)
        print(f"| {kind} | {n} | {params} | {row[0]} | {row[1]} |")
    for pr in progs:
        if pr["dots"] not in kinds:
            ms = f"{statistics.median(pr['ms']):.2f}"
            cells = [ms, "-"] if pr["who"] == "ours" else ["-", ms]
            print(f"| {pr['who']} {pr['name'][:40]} | {pr['dots']} | {len(pr['host'])} | "
                  f"{cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()

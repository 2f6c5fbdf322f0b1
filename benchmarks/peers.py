"""The same GPT training and inference steps on torch_tpu's three modes and on the peers
that run PyTorch (or the same model) through XLA: PyTorch CPU eager, Google's TorchTPU
(its eager modes on the same CPU PJRT plugin as ours), torch_xla 2.9 (eager, lazy,
torch.compile(backend="openxla")) and JAX (jit), in one run.

    python benchmarks/peers.py --setup      # once: creates .peers/google_tpu, .peers/torch_xla, .peers/jax
    python benchmarks/peers.py              # the table (.peers/peers.md and .peers/peers.json)
    python benchmarks/peers.py --modes strict_eager,defer_and_fuse --steps 5
    python benchmarks/peers.py --modes defer_and_fuse,defer_and_fuse+TORCH_TPU_CPU_HOST_GEMM=0
                                            # a mode+VAR=VAL row: that setting's A/B in one run

Modes:
  strict_eager, defer_and_fuse   torch_tpu on the `tpu` device (the CPU PJRT plugin by default)
  compiled                       torch.compile(step, backend="tpu") of the whole step
  cpu_eager                      PyTorch's CPU backend (this venv's torch)
  xla_eager                      torch_xla's eager mode (torch_xla.experimental.eager_mode)
  xla_lazy                       torch_xla's lazy tensors, torch_xla.sync() once per step
  xla_compiled                   torch.compile(step, backend="openxla") of the whole step
  jax_jit                        the same GPT in jax.numpy, jax.jit of the whole step
                                 (value_and_grad + an AdamW written to match torch's)
  google_defer_never             Google's TorchTPU (PyPI torch-tpu 0.2.0), EagerMode.DEFER_NEVER
  google_defer_and_fuse          the same, EagerMode.DEFER_AND_FUSE
  google_launch_blocking         the same, EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
  google_compiled                the same, torch.compile(step, backend="tpu")

Google's TorchTPU has the same import name as ours (torch_tpu), so it lives in its own
venv (.peers/google_tpu, torch 2.13.0 + torch-tpu 0.2.0). It looks for a TPU at import;
here it is started by hand on the CPU PJRT plugin we use (TPU_LIBRARY_PATH pointed at
xla-cpu-pjrt's xla_cpu_pjrt.so, then torch_tpu._loader._init_device("tpu")): the same
compiler, so its programs and ours can be compared. Its torch.compile needs plugin
calls that xla-cpu-pjrt 0.0.1 lacks ("GetOutputMemoryKinds is not supported"): that
row reports the error. Its compile count is the "num_compilations" its compilation
cache logs at exit.

torch_xla 2.9 needs its own torch 2.9: PyPI's wheel (the CUDA build, which pulls in
NVIDIA's libraries, about 3 GiB, but runs on the CPU; XLA runs on the CPU through
PJRT_DEVICE=CPU). So each peer runs in a subprocess with its own virtual environment's
Python (.peers/<name>/bin/python, made by --setup; missing ones are reported as rows).

The model and its step are the same everywhere: one set of initial weights and one
batch are made here from a fixed seed (torch's GPT init) and saved as .npz; every
peer loads them, so the losses of the steps must agree. The table gives, per mode, the largest
difference of its per-step losses from PyTorch CPU eager's. The timed steps run in
rounds (one step of every mode per round), so that load from elsewhere on the machine
falls on all modes alike; the figure is the median step after warm-up. Each step ends
when its device work has (the loss read on the host, then the device waited for).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import gpt_bench  # (this script's directory is on sys.path)
import step_children
from step_children import StepChild

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PEERS_DIR = os.path.join(ROOT, ".peers")
OURS = ("strict_eager", "defer_and_fuse", "compiled", "cpu_eager")
XLA = ("xla_eager", "xla_lazy", "xla_compiled")
# Google's modes and how each is selected (torch.tpu.EagerMode member; None: compiled).
GOOGLE = {"google_defer_never": "DEFER_NEVER", "google_defer_and_fuse": "DEFER_AND_FUSE",
          "google_launch_blocking": "DEFER_NEVER_AND_LAUNCH_BLOCKING", "google_compiled": None}
MODES = OURS + tuple(GOOGLE) + XLA + ("jax_jit",)
# The peer environments: what --setup installs into each (pinned: the table names them).
ENVS = {
    "torch_xla": ["torch==2.9.0", "torch-xla==2.9.0", "numpy"],
    "jax": ["jax==0.10.2", "jaxlib==0.10.2", "numpy"],
    "google_tpu": ["torch==2.13.0", "torch-tpu==0.2.0", "numpy"],
}
LR, BETAS, EPS, WEIGHT_DECAY = 3e-4, (0.9, 0.999), 1e-8, 0.01  # torch.optim.AdamW's defaults


def env_of(mode):
    if mode in XLA:
        return "torch_xla"
    if mode == "jax_jit":
        return "jax"
    if mode in GOOGLE:
        return "google_tpu"
    return None


def python_of(mode, peers_dir=PEERS_DIR):
    env = env_of(mode)
    return sys.executable if env is None else os.path.join(peers_dir, env, "bin", "python")


# ----------------------------------------------------------------- set-up (parent)

def setup_envs(names, peers_dir):
    for name in names:
        path = os.path.join(peers_dir, name)
        py = os.path.join(path, "bin", "python")
        if not os.path.exists(py):
            print(f"creating {path}", flush=True)
            subprocess.run([sys.executable, "-m", "venv", "--clear", path], check=True)
        print(f"installing {' '.join(ENVS[name])} into {path}", flush=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *ENVS[name]], check=True)


def make_init(args, path):
    """The initial weights (torch's GPT init from seed 0) and one batch, as numpy arrays:
    every peer starts from exactly these."""
    import numpy as np
    import torch
    sys.path.insert(0, ROOT)
    from examples.mingpt.model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(config(args, GPTConfig))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.batch, args.context), generator=g)
    y = torch.randint(0, args.vocab, (args.batch, args.context), generator=g)
    arrays = {"param." + k: v.detach().numpy() for k, v in model.state_dict().items()}
    np.savez(path, x=x.numpy(), y=y.numpy(), **arrays)


def config(args, GPTConfig):
    return GPTConfig(vocab_size=args.vocab, block_size=args.context, n_layer=args.layers,
                     n_head=args.heads, n_embd=args.width)


# --------------------------------------------------------------- the torch peers

def torch_setup(mode, args, train):
    """Model, AdamW and step function for one of the PyTorch modes; returns step()
    returning the loss as a Python float once the step's device work is done."""
    import numpy as np
    import torch
    if mode in GOOGLE:
        # Before ROOT goes on sys.path: ROOT/torch_tpu is ours, of the same name.
        dev, wait = google_device(mode), torch.accelerator.synchronize
    sys.path.insert(0, ROOT)
    from examples.mingpt.model import GPT, GPTConfig
    if mode in GOOGLE:
        pass
    elif mode in XLA:
        import torch_xla
        import torch_xla.core.xla_model as xm
        if mode == "xla_eager":
            torch_xla.experimental.eager_mode(True)
        dev = torch_xla.device()
        wait = xm.wait_device_ops
    elif mode == "cpu_eager":
        dev, wait = "cpu", (lambda: None)
    else:
        import torch_tpu
        torch_tpu.set_execution_mode("defer_and_fuse" if mode == "defer_and_fuse"
                                     else "strict_eager")
        dev, wait = "tpu", torch.tpu.synchronize
    init = np.load(args.init)
    model = GPT(config(args, GPTConfig))
    state = {k[6:]: torch.from_numpy(init[k]) for k in init.files if k.startswith("param.")}
    model.load_state_dict(state)
    model = model.to(dev)
    x = torch.from_numpy(init["x"]).to(dev)
    y = torch.from_numpy(init["y"]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY)
    if not train:
        model.eval()

    step = gpt_bench.make_step(model, opt, x, y, train)

    if mode in ("compiled", "google_compiled"):
        step = torch.compile(step, backend="tpu")
    elif mode == "xla_compiled":
        step = torch.compile(step, backend="openxla")

    def timed_step():
        loss = step()
        if mode == "xla_lazy":
            torch_xla.sync()  # the step's graph runs here (once per step, as mark_step)
        value = loss.item()
        wait()  # the optimizer's work, which the loss does not wait for
        return value
    return timed_step


def google_device(mode):
    """Starts Google's TorchTPU (this venv's torch_tpu) on the PJRT plugin that
    TPU_LIBRARY_PATH names (the parent points it at our CPU plugin) in `mode`'s eager
    mode; returns the device. Its import looks for a TPU and starts nothing without
    one; _init_device is what its import runs when it finds one."""
    import torch
    import torch_tpu
    torch_tpu._loader._init_device("tpu")
    if GOOGLE[mode] is not None:
        import warnings
        with warnings.catch_warnings():  # "eager_mode is experimental"
            warnings.simplefilter("ignore")
            torch.tpu.eager_mode = getattr(torch.tpu.EagerMode, GOOGLE[mode])
    return "tpu"


def google_compiles(log_path):
    """Programs Google's TorchTPU compiled: its compilation cache logs
    "num_compilations=N" at exit (stderr, kept in `log_path`); None if absent."""
    import re
    try:
        with open(log_path, errors="replace") as f:
            found = re.findall(r"num_compilations=(\d+)", f.read())
    except OSError:
        return None
    return sum(int(n) for n in found) if found else None


def our_compiles():
    """Programs our torch_tpu compiled in this process (none when loaded from disk)."""
    import torch_tpu
    return torch_tpu.debug.metrics()["programs_compiled"]


# ------------------------------------------------------------------- the JAX peer

def jax_setup(args, train):
    """The GPT of examples/mingpt in jax.numpy with torch's parameter names and
    layouts, and AdamW as torch computes it; jax.jit of the whole step."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    init = np.load(args.init)
    # head.weight is tok.weight (tied): one parameter, used twice, as in torch.
    params = {k[6:]: jnp.asarray(init[k]) for k in init.files
              if k.startswith("param.") and k != "param.head.weight"}
    x, y = jnp.asarray(init["x"]), jnp.asarray(init["y"])
    n_head, t = args.heads, args.context
    mask = jnp.tril(jnp.ones((t, t), dtype=bool))

    def linear(p, name, h):
        out = h @ p[name + ".weight"].T
        b = p.get(name + ".bias")
        return out if b is None else out + b

    def layer_norm(p, name, h):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / jnp.sqrt(var + 1e-5) * p[name + ".weight"] + p[name + ".bias"]

    def attention(p, name, h):
        b, tt, c = h.shape
        q, k, v = jnp.split(linear(p, name + ".qkv", h), 3, axis=2)
        heads = lambda z: z.reshape(b, tt, n_head, c // n_head).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / np.sqrt(c // n_head))
        att = jnp.where(mask[:tt, :tt], att, -jnp.inf)
        att = jax.nn.softmax(att, axis=-1)
        out = (att @ v).transpose(0, 2, 1, 3).reshape(b, tt, c)
        return linear(p, name + ".proj", out)

    def loss_fn(p):
        h = p["tok.weight"][x] + p["pos.weight"][jnp.arange(x.shape[1])]
        for i in range(args.layers):
            blk = f"blocks.{i}"
            h = h + attention(p, blk + ".attn", layer_norm(p, blk + ".ln1", h))
            m = layer_norm(p, blk + ".ln2", h)
            m = linear(p, blk + ".mlp.0", m)
            m = jax.nn.gelu(m, approximate=False)  # nn.GELU(): the erf form
            h = h + linear(p, blk + ".mlp.2", m)
        logits = layer_norm(p, "ln_f", h) @ p["tok.weight"].T
        logp = jax.nn.log_softmax(logits.reshape(-1, logits.shape[-1]), axis=-1)
        return -jnp.take_along_axis(logp, y.reshape(-1, 1), axis=1).mean()

    def train_step(p, m, v, count):
        # torch.optim.AdamW (not foreach-specific: the same arithmetic): decoupled
        # weight decay first, then the bias-corrected Adam update.
        loss, g = jax.value_and_grad(loss_fn)(p)
        count = count + 1
        b1, b2 = BETAS
        bc1 = 1 - b1 ** count
        bc2_sqrt = jnp.sqrt(1 - b2 ** count)
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            pk = p[k] * (1 - LR * WEIGHT_DECAY)
            mk = b1 * m[k] + (1 - b1) * g[k]
            vk = b2 * v[k] + (1 - b2) * g[k] * g[k]
            denom = jnp.sqrt(vk) / bc2_sqrt + EPS
            new_p[k] = pk - (LR / bc1) * mk / denom
            new_m[k], new_v[k] = mk, vk
        return loss, new_p, new_m, new_v, count

    state = {"p": params, "m": {k: jnp.zeros_like(a) for k, a in params.items()},
             "v": {k: jnp.zeros_like(a) for k, a in params.items()},
             "count": jnp.asarray(0.0, dtype=jnp.float32)}
    if train:
        jstep = jax.jit(train_step, donate_argnums=(0, 1, 2))

        def step():
            loss, state["p"], state["m"], state["v"], state["count"] = jstep(
                state["p"], state["m"], state["v"], state["count"])
            value = float(loss)
            jax.block_until_ready(state["p"])
            return value
    else:
        jloss = jax.jit(loss_fn)

        def step():
            return float(jloss(state["p"]))
    return step


# ------------------------------------------------------------ one mode (child)

def child(args):
    """Runs one (mode, step kind) as the parent directs over stdin/stdout: "warmup"
    (the first step timed, then the rest of the warm-up), "step" (one timed step),
    "done". Lines to the parent start with "RESULT "."""
    def reply(obj):
        print("RESULT " + json.dumps(obj), flush=True)

    if args.log:  # stderr (C++ logs included) to a file the parent reads afterwards
        fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    counts = our_compiles if args.child in OURS[:3] else (lambda: None)
    try:
        if args.threads and args.child != "jax_jit":
            import torch
            torch.set_num_threads(args.threads)
        if args.child == "jax_jit":
            step = jax_setup(args, args.train)
            version = __import__("jax").__version__
        else:
            step = torch_setup(args.child, args, args.train)
            import torch
            version = torch.__version__
            if args.child in XLA:
                version = "torch_xla " + __import__("torch_xla").__version__ + ", torch " + version
        losses = []
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "warmup":
                # Each warm-up step timed: the first one compiles from empty caches,
                # and a backend that compiles in the background may pay in the second.
                warmup = []
                for _ in range(args.warmup):
                    t = time.perf_counter()
                    losses.append(step())
                    warmup.append(time.perf_counter() - t)
                    if len(warmup) == 1:
                        first_compiles = counts()
                reply(dict(first=warmup[0], warmup=warmup, version=version,
                           first_compiles=first_compiles, compiles=counts()))
            elif cmd == "step":
                t, c = time.perf_counter(), time.process_time()
                losses.append(step())
                reply(dict(time=time.perf_counter() - t, cpu=time.process_time() - c))
            elif cmd == "done":
                reply(dict(losses=losses, compiles=counts()))
                return
    except Exception as e:  # a peer that cannot run here is a row, not a crash
        text = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        msg = text[0][:200] if text else ""
        # A long compiler error's cause is often further down ("... is not supported").
        cause = next((ln for ln in text[1:] if "not supported" in ln.lower()), None)
        if cause:
            msg += " ... " + cause[:200]
        reply(dict(error=f"{type(e).__name__}: {msg}"))


def split_mode(mode):
    """A mode with environment settings ("defer_and_fuse+TORCH_TPU_CPU_HOST_GEMM=0", for an
    A/B of a setting within one interleaved run): (the mode, {variable: value})."""
    base, *settings = mode.split("+")
    return base, dict(kv.split("=", 1) for kv in settings)


def start_child(mode, args, train):
    """One mode's interpreter: its venv's python (an error row when that venv is
    missing), with empty compile caches of its own so the first step compiles."""
    label = mode
    mode, extra_env = split_mode(label)
    py = python_of(mode, args.peers_dir)
    if not os.path.exists(py):
        return StepChild(label, error=f"no {os.path.dirname(os.path.dirname(py))} "
                                     f"(run benchmarks/peers.py --setup)")
    cmd = [py, os.path.abspath(__file__), "--child", mode, "--init", args.init,
           "--warmup", str(args.warmup), "--threads", str(args.threads or 0)]
    cmd += size_flags(args) + (["--train"] if train else [])
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PJRT_DEVICE="CPU", JAX_PLATFORMS="cpu")
    if mode in GOOGLE:
        # Our settings must not reach Google's torch_tpu (it reads some of the same
        # names, TORCH_TPU_DEFER_AND_FUSE and TORCH_TPU_LAUNCH_BLOCKING among them);
        # its mode is set through its API (google_device).
        env = {k: v for k, v in env.items() if not k.startswith(("TORCH_TPU_", "TPU_"))}
        plugin = cpu_plugin_path()
        if plugin is None:
            return StepChild(label, error="no CPU PJRT plugin (xla-cpu-pjrt) in this venv")
        env["TPU_LIBRARY_PATH"] = plugin
        cmd += ["--log", log_path(mode, args, train)]
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    env.update(extra_env)
    # Empty for each mode and step kind: the first step compiles (an inference child
    # sharing the training child's directory would load its programs from disk).
    kind = "train" if train else "infer"
    env["TORCH_TPU_CACHE_DIR"] = os.path.join(args.cache, f"{label}_{kind}")
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(args.cache, f"{label}_{kind}_inductor")
    return StepChild(label, cmd, env, quiet=not args.verbose)


def log_path(mode, args, train):
    return os.path.join(args.cache, f"{mode}_{'train' if train else 'infer'}.log")


def cpu_plugin_path():
    """The xla_cpu_pjrt.so our torch_tpu uses (torch_tpu/_plugin_paths.py, loaded by
    path: importing our torch_tpu package here would import torch)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_plugin_paths", os.path.join(ROOT, "torch_tpu", "_plugin_paths.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cpu_plugin_path()


def size_flags(args):
    return gpt_bench.size_argv(args) + ["--vocab", str(args.vocab)]


def measure(modes, args, train):
    """Warm-up one mode at a time (so the first step's compile time is its own),
    then the timed steps in rounds, one step of every mode per round."""
    rows = step_children.measure(modes, lambda m: start_child(m, args, train), args.steps)
    for m, r in rows.items():
        if m in GOOGLE and "error" not in r:
            r["compiles"] = google_compiles(log_path(m, args, train))
    return rows


def loss_gap(rows, ref="cpu_eager"):
    """Per mode: the largest |loss - reference loss| over the steps both ran."""
    base = rows.get(ref, {}).get("losses")
    if not base:
        base = next((r["losses"] for r in rows.values() if r.get("losses")), None)
    for r in rows.values():
        if r.get("losses") and base:
            r["loss_gap"] = max(abs(a - b) for a, b in zip(r["losses"], base))


def table(results, args):
    lines = [f"GPT {args.layers} layers x {args.width}, context {args.context}, batch "
             f"{args.batch}, AdamW; median of {args.steps} steps after {args.warmup} warm-up "
             f"(rounds interleaved); {os.cpu_count()} CPUs"
             + (f", {args.threads} PyTorch thread(s)" if args.threads else "")
             + f"; load average {args.load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at "
             "the end", "",
             "CPU ms: the process's CPU time in the step, all its threads (what a loaded "
             "machine changes least; wall time there is mostly the share of the cores a "
             "process gets).", "",
             "| step | mode | median ms | CPU ms | first ms | end of 3rd step ms | programs compiled "
             "| vs CPU eager | vs Strict Eager | max loss diff vs CPU eager | version |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for kind, rows in results.items():
        cpu = rows.get("cpu_eager", {}).get("median")
        strict = rows.get("strict_eager", {}).get("median")
        for m, r in rows.items():
            if "error" in r:
                lines.append(f"| {kind} | {m} | error: {r['error']} | | | | | | | | |")
                continue
            ratio = lambda base: f"{base / r['median']:.2f}x" if base else "-"  # noqa: E731
            gap = r.get("loss_gap")
            warm = r.get("warmup") or []
            third = f"{1e3 * sum(warm[:3]):.0f}" if len(warm) >= 3 else "-"
            compiles = "-" if r.get("compiles") is None else str(r["compiles"])
            cpu_ms = f"{1e3 * statistics.median(r['cpus']):.1f}" if r.get("cpus") else "-"
            lines.append(f"| {kind} | {m} | {1e3 * r['median']:.1f} | {cpu_ms} | "
                         f"{1e3 * r['first']:.1f} | "
                         f"{third} | {compiles} | {ratio(cpu)} | {ratio(strict)} | "
                         f"{'-' if gap is None else format(gap, '.2e')} | {r.get('version', '')} |")
    lines.append("")
    for kind, rows in results.items():
        for a, b, what in (("compiled", "xla_compiled", "compiled whole step vs torch_xla's"),
                           ("defer_and_fuse", "strict_eager", "Defer & Fuse vs Strict Eager"),
                           ("strict_eager", "google_defer_never",
                            "Strict Eager vs Google's DEFER_NEVER"),
                           ("defer_and_fuse", "google_defer_and_fuse",
                            "Defer & Fuse vs Google's DEFER_AND_FUSE"),
                           ("compiled", "google_defer_and_fuse",
                            "compiled whole step vs Google's DEFER_AND_FUSE")):
            ra, rb = rows.get(a, {}), rows.get(b, {})
            ta, tb = ra.get("median"), rb.get("median")
            if ta and tb:
                line = f"- {kind}: {what}: {tb / ta:.2f}x faster"
                if ra.get("cpus") and rb.get("cpus"):
                    ca, cb = statistics.median(ra["cpus"]), statistics.median(rb["cpus"])
                    line += f" (CPU time {cb / ca:.2f}x less)"
                wa, wb = ra.get("warmup") or [], rb.get("warmup") or []
                if len(wa) >= 3 and len(wb) >= 3:
                    line += (f" (first step {wb[0] / wa[0]:.2f}x, end of 3rd step "
                             f"{sum(wb[:3]) / sum(wa[:3]):.2f}x, empty caches)")
                lines.append(line)
    return "\n".join(lines)


def write(args, text, results):
    with open(args.out + ".md", "w") as f:
        f.write(text + "\n")
    with open(args.out + ".json", "w") as f:
        json.dump(dict(config=dict(layers=args.layers, width=args.width, heads=args.heads,
                                   context=args.context, batch=args.batch, vocab=args.vocab,
                                   steps=args.steps, warmup=args.warmup),
                       results=results), f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--setup", nargs="?", const=",".join(ENVS), metavar="ENV,...",
                   help="create the peer virtual environments under .peers/ and exit "
                        f"(default: all of {', '.join(ENVS)})")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--kinds", default="train,infer", help="train, infer or both")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    gpt_bench.add_size_args(p)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--out", default=os.path.join(PEERS_DIR, "peers"),
                   help="writes OUT.md (the table) and OUT.json (every figure)")
    p.add_argument("--threads", type=int, default=0,
                   help="PyTorch intra-op threads in every torch peer (default: PyTorch's own)")
    p.add_argument("--peers-dir", default=PEERS_DIR,
                   help="where --setup puts the peer environments (default .peers/)")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    p.add_argument("--train", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.setup:
        names = [n.strip() for n in args.setup.split(",") if n.strip()]
        unknown = [n for n in names if n not in ENVS]
        if unknown:
            p.error(f"unknown environment(s) {', '.join(unknown)}; choose from {', '.join(ENVS)}")
        return setup_envs(names, args.peers_dir)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if split_mode(m)[0] not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if any(k not in ("train", "infer") for k in kinds):
        p.error("--kinds takes train, infer or both")
    import tempfile
    args.load = os.getloadavg()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torch_tpu_peers_") as tmp:
        args.cache = tmp
        args.init = os.path.join(tmp, "init.npz")
        make_init(args, args.init)
        results = {}
        for kind in kinds:
            results[kind] = measure(modes, args, kind == "train")
            loss_gap(results[kind])
            # Written after each step kind: a long run that is stopped keeps what it measured.
            text = table(results, args)
            write(args, text, results)
    print(text)
    print(f"wrote {args.out}.md and {args.out}.json")


if __name__ == "__main__":
    main()

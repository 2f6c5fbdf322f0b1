"""`torch.ops.tpu_inductor.graph`: one whole inductor graph run as one fused program.

Inductor's generated wrapper for a tpu graph calls this op once (see
inductor_backend.py). Its arguments are the graph's inputs and a key naming the
graph; the op runs that graph through the same runner as
`torch.compile(backend="tpu")` (graph_runner.CompiledGraph: one StableHLO program,
called directly after its first call).

The key is a hash of the pickled graph, and the pickle is written next to inductor's
own cache (`<inductor cache dir>/torch_tpu_graphs/<key>.pkl`): inductor caches the
generated wrapper on disk, and a later process that finds the wrapper there runs
it without running our pass again, so the graph must be found from the key alone.
In the process that compiled it the graph comes from memory (with its FX metadata);
loaded from disk, its metadata is recomputed from the first call's inputs.
"""
import hashlib
import os
import pickle
import threading

import torch

_lib = torch.library.Library("tpu_inductor", "DEF")
_lib.define("graph(str key, Tensor[] args, SymInt[] ints) -> Tensor[]")
# The graph's writes into its inputs (AOTAutograd's trailing `copy_` nodes: BatchNorm
# statistics, an optimizer's parameters). Inductor's fallback kernels accept a
# mutating custom op only if it returns no tensor list, so the graph op stays
# functional (the new values are among its outputs) and this op writes them back.
_lib.define("write_back(Tensor(a!)[] dst, Tensor[] src) -> ()")

_entries = {}
_lock = threading.Lock()


class _Entry:
    """A graph, how its placeholders map to the op's `args`/`ints`, and its runner."""

    def __init__(self, gm, layout):
        self.gm = gm
        self.layout = layout  # per placeholder: ("t", index in args) or ("i", index in ints)
        self._runner = None

    def arrange(self, args, ints):
        return [args[i] if kind == "t" else ints[i] for kind, i in self.layout]

    def run(self, args, ints):
        inputs = self.arrange(args, ints)
        if self._runner is None:
            from .graph_runner import CompiledGraph
            if not _has_meta(self.gm):
                _propagate_meta(self.gm, inputs)
            self._runner = CompiledGraph(self.gm, "inductor")
        outs = self._runner(inputs)
        return list(outs)


def _has_meta(gm):
    return all("val" in n.meta for n in gm.graph.nodes if n.op == "placeholder")


def _propagate_meta(gm, inputs):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs)


def _graph_dir():
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    return os.path.join(cache_dir(), "torch_tpu_graphs")


def _call_hop(name, *args, **kwargs):
    """A higher-order op's call as a pickled graph holds it (see _picklable)."""
    return getattr(torch.ops.higher_order, name)(*args, **kwargs)


class _HopTracer(torch.fx.Tracer):
    """Rebuilds an unpickled graph that calls higher-order ops: _call_hop stays one node."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("autowrap_functions", (_call_hop,))
        super().__init__(*args, **kwargs)


def _picklable(gm):
    """A pickled GraphModule is rebuilt by tracing its code, and a higher-order op
    cannot be traced that way (flex_attention refuses proxies for its captured
    tensors): such calls become `_call_hop(name, ...)` in the copy that is pickled."""
    def is_hop(n):
        return n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator)
    if not any(is_hop(n) for n in gm.graph.nodes) and not any(
            isinstance(m, torch.fx.GraphModule) and m is not gm and
            any(is_hop(n) for n in m.graph.nodes) for m in gm.modules()):
        return gm
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    copy = torch.fx.GraphModule(gm, graph)
    for n in graph.nodes:
        if is_hop(n):
            n.args, n.target = (n.target.name(), *n.args), _call_hop
        elif n.op == "get_attr" and isinstance(getattr(copy, n.target, None), torch.fx.GraphModule):
            setattr(copy, n.target, _picklable(getattr(copy, n.target)))
    copy._tracer_cls = _HopTracer
    copy.recompile()
    return copy


def add(gm, layout):
    """Registers a graph; returns its key (stable across processes). A graph that cannot
    be pickled, or a cache directory that cannot be written, only costs the reuse of
    inductor's cached wrapper in another process (which then says so)."""
    try:
        payload = pickle.dumps((_picklable(gm), layout))
    except Exception:  # noqa: BLE001  (e.g. a constant that does not pickle)
        payload = None
    key = hashlib.sha256(payload).hexdigest()[:40] if payload else f"mem{id(gm):x}{os.getpid()}"
    with _lock:
        if key not in _entries:
            _entries[key] = _Entry(gm, layout)
    if payload is not None:
        path = os.path.join(_graph_dir(), key + ".pkl")
        try:
            if not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as f:
                    f.write(payload)
                os.replace(tmp, path)
        except OSError as e:
            import warnings
            warnings.warn(f"tpu: could not keep compiled graph {key} for later processes: {e}")
    return key


def entry(key):
    e = _entries.get(key)
    if e is not None:
        return e
    path = os.path.join(_graph_dir(), key + ".pkl")
    try:
        with open(path, "rb") as f:
            gm, layout = pickle.load(f)
    except FileNotFoundError:
        raise RuntimeError(
            f"tpu: inductor's cached code refers to graph {key}, whose file {path} is gone "
            "(the inductor cache directory was cleared in part). Clear it "
            "(rm -rf the directory named by torch._inductor.runtime.cache_dir_utils.cache_dir()) "
            "or run with TORCHINDUCTOR_FX_GRAPH_CACHE=0") from None
    with _lock:
        return _entries.setdefault(key, _Entry(gm, layout))


# A Python kernel runs with every dispatch key above the backend excluded. A graph
# holding a higher-order op that vmaps its subgraphs (flex_attention over the score
# matrix) needs functorch's vmap keys back while it runs (nothing else: autograd is
# not wanted inside a compiled graph).
_VMAP_KEYS = (torch._C.DispatchKey.FuncTorchDynamicLayerFrontMode,
              torch._C.DispatchKey.FuncTorchDynamicLayerBackMode,
              torch._C.DispatchKey.FuncTorchBatched,
              torch._C.DispatchKey.FuncTorchVmapMode)


def _run(key, args, ints):
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for k in _VMAP_KEYS:
        exclude = exclude.remove(k)
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude):
        return entry(key).run(list(args), list(ints))


def _fake(key, args, ints):
    # The graph itself, run on fake inputs, gives shapes, strides and dtypes (symbolic
    # ones included); the outputs are new tensors of those layouts.
    e = entry(key)
    outs = e.gm(*e.arrange(list(args), list(ints)))
    return [torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device) for o in outs]


def _write_back(dst, src):
    for d, s in zip(dst, src):
        d.copy_(s)


def _write_back_fake(dst, src):
    return None


_lib.impl("graph", _run, "CompositeExplicitAutograd")
torch.library.register_fake("tpu_inductor::graph", _fake, lib=_lib)
_lib.impl("write_back", _write_back, "CompositeExplicitAutograd")
torch.library.register_fake("tpu_inductor::write_back", _write_back_fake, lib=_lib)

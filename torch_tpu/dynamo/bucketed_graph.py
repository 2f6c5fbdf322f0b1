"""Runs a graph with symbolic sizes as one program per bucket instead of per size.

A graph whose inputs have symbolic sizes (Dynamo's `dynamic=True`,
`torch._dynamo.mark_dynamic`) is called with the real sizes. BucketedGraph rounds
each symbol up to its bucket (buckets.py), pads the inputs to the bucket with zeros,
and calls the program traced for that bucket (masked_trace.py: padding is masked
out of every reduction, so results at real positions are exact), with the real
sizes as runtime inputs; outputs are then sliced back to the real sizes (views, no
program). The first call of a bucket runs the graph through the masking
interpreter under the usual CompiledGraph, whose Defer & Fuse recorder makes it
one fused program, called directly afterwards.

Inputs are padded through the host: a device program that pads would itself be
compiled once per real size. Reading a sliced-back output (`.cpu()`) takes the
padded buffer to the host and slices there (copy_kernels.cc), no program either.
A graph with CPU scalar work (cpu_prologue.py) is split first; its CPU part runs
at the real sizes every call and the device part runs padded. Graphs that cannot
be padded (an op with no masking rule on a padded dim, see
masked_trace.Unsupported) run per size as before, and stats() says why.
"""

import sympy
import torch

from . import buckets as _buckets
from . import cpu_prologue, masked_trace
from .tally import Tally

_tally = Tally("bucketed_graphs", "per_size_graphs", "bucket_programs", "padded_calls",
               "per_size_calls")


def stats():
    """A dict: bucketed_graphs / per_size_graphs (symbolic-size graphs that run padded
    / per size), bucket_programs (programs traced for buckets), padded_calls,
    per_size_calls, per_size_reasons (why graphs run per size, newest last)."""
    d, reasons = _tally.snapshot()
    d["per_size_reasons"] = reasons
    return d


def reset_stats():
    _tally.reset()


def _count(key, n=1):
    _tally.count(key, n)


def _per_size(why):
    _tally.reason(why)


def _expr(d):
    return masked_trace.canonical(d.node.expr) if isinstance(d, torch.SymInt) else sympy.Integer(int(d))


def _upper(sym_int, sym):
    shape_env = sym_int.node.shape_env
    vr = shape_env.var_to_range.get(sym) if shape_env is not None else None
    if vr is None:
        return None
    up = vr.upper
    if not getattr(up, "is_Integer", False) and not isinstance(up, int):
        return None  # unbounded (sympy or torch's int infinity)
    up = int(up)
    return up if up < (1 << 62) else None


def _polynomial(e):
    """A size whose real value slices the output back: the padded program makes
    the real positions of such a dim a prefix (masked_trace.compact_outputs for a
    product of symbols, a flattened view of padded dims)."""
    return e.is_number or isinstance(e, sympy.Symbol) or (
        isinstance(e, (sympy.Add, sympy.Mul)) and all(_polynomial(a) for a in e.args))


def has_symbolic_inputs(gm):
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            v = n.meta.get("val")
            if isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(
                    isinstance(d, torch.SymInt) for d in v.shape)):
                return True
    return False


class BucketedGraph:
    """Called like CompiledGraph (a boxed list of inputs)."""

    def __init__(self, gm, kind, policy, per_size, counted=True):
        # counted: whether stats() (torch_tpu.debug.dynamic_shapes(), the compiled
        # mode's figures) counts this graph; Defer & Fuse's buckets keep their own
        self._counted = counted
        # CPU scalar work (a constant computed from a CPU 0-dim tensor, as GPT-2's
        # GELU has) is split off first and runs eagerly every call at the real
        # sizes; the device part, whose inputs are then all device tensors and
        # sizes, is what runs padded (and, when it cannot, per size).
        self._split = cpu_prologue.split(gm)
        if self._split is not None:
            gm = self._split.device_gm
            per_size = lambda rec: _per_size_graph(gm, kind, rec)  # noqa: E731
        self.gm = gm
        self.kind = kind
        self.policy = policy
        self._per_size_factory = per_size
        self._record = None   # one debug.compiled_graphs() record for all its programs
        self._per_size = None
        self._programs = {}   # bucket sizes -> (CompiledGraph, host checks)
        self._exact = set()   # symbols used as values: they run at their exact size
        self._sizes = {}      # (symbol index, real size) -> 0-dim int64 device tensor
        self.why_per_size = None
        self._plan(gm)
        if self.why_per_size:
            self._note("per_size_graphs")
            self._note_why(self.why_per_size)
        else:
            self._note("bucketed_graphs")

    def _note(self, key, n=1):
        if self._counted:
            _count(key, n)

    def _note_why(self, why):
        if self._counted:
            _per_size(why)

    def _plan(self, gm):
        """Where each symbol's real value is read from, its upper bound, and each
        input's padded shape as sympy expressions."""
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.syms, self.source, self.upper = [], {}, {}
        self.shapes = []  # per placeholder: list of exprs (tensor), expr (SymInt), or None
        for i, n in enumerate(self.placeholders):
            v = n.meta.get("val")
            if isinstance(v, torch.SymInt):
                e = _expr(v)
                self.shapes.append(e)
                if isinstance(e, sympy.Symbol):
                    self._add_sym(e, v, ("int", i))
            elif isinstance(v, torch.Tensor):
                exprs = [_expr(d) for d in v.shape]
                self.shapes.append(exprs)
                for d, (size, e) in enumerate(zip(v.shape, exprs)):
                    if isinstance(e, sympy.Symbol):
                        self._add_sym(e, size, ("dim", i, d))
            else:
                self.shapes.append(None)
        for shape in self.shapes:
            exprs = shape if isinstance(shape, list) else [shape] if shape is not None else []
            for e in exprs:
                if not e.free_symbols <= set(self.syms):
                    self.why_per_size = f"a size {e} that no input gives"
        outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        self.out_shapes = []
        for o in outs:
            v = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
            if isinstance(v, torch.Tensor):
                exprs = [_expr(d) for d in v.shape]
                if any(not _polynomial(e) for e in exprs):
                    self.why_per_size = f"an output of size {tuple(exprs)}"
                self.out_shapes.append(exprs)
            elif isinstance(v, torch.SymInt):
                self.out_shapes.append(_expr(v))
            else:
                self.out_shapes.append(None)
        if not self.syms:
            self.why_per_size = "no symbolic input size"
        if self.kind != "inference":
            for shape in self.shapes + self.out_shapes:
                for e in (shape if isinstance(shape, list) else []):
                    if not (e.is_number or isinstance(e, sympy.Symbol) or masked_trace._is_sum(e)):
                        # A flattened view of padded dims crosses the forward/backward
                        # boundary: one side would see its real rows as a prefix, the
                        # other in the padded row-major order (see docs/compile.md).
                        self.why_per_size = f"a training graph input or output of size {e}"
        for n in gm.graph.nodes:
            if n.op == "call_function" and getattr(n.target, "_schema", None) is not None and \
                    n.target._schema.is_mutable and any(
                        isinstance(a, torch.fx.Node) and a.op == "placeholder" and isinstance(
                            self.shapes[self.placeholders.index(a)], list) and any(
                            not e.is_number for e in self.shapes[self.placeholders.index(a)])
                        for a in n.args):
                # the padded program gets a padded copy of the input: the write would be lost
                self.why_per_size = f"{n.target} writes into an input of symbolic size"

    def _add_sym(self, sym, sym_int, where):
        if sym in self.source:
            return
        self.syms.append(sym)
        self.source[sym] = where
        self.upper[sym] = _upper(sym_int, sym) if isinstance(sym_int, torch.SymInt) else None

    # -- calls ---------------------------------------------------------------------
    def __call__(self, args):
        if self._split is not None:
            args[:] = self._split.device_args(args)  # the CPU part runs here
        while self.why_per_size is None:
            real = self._real_sizes(args)
            key = tuple(real[s] if s in self._exact else
                        _buckets.bucket_for(real[s], self.policy, self.upper[s]) for s in self.syms)
            entry = self._programs.get(key)
            if entry is None:
                entry = self._build(key, args, real)
            if entry is False:
                break
            outs = self._run(entry, key, args, real)
            if outs is not None:
                return outs
        self._note("per_size_calls")
        if self._per_size is None:
            self._per_size = self._per_size_factory(self._record)
            self._record = self._per_size.record
        return self._per_size(args)

    def _real_sizes(self, args):
        real = {}
        for s in self.syms:
            w = self.source[s]
            v = int(args[w[1]]) if w[0] == "int" else int(args[w[1]].shape[w[2]])
            up = self.upper[s]
            if up is not None and v > up:
                raise ValueError(
                    f"torch.compile(backend='tpu'): size {v} of a dynamic dimension is above its "
                    f"bound {up} (torch._dynamo.mark_dynamic(..., max={up}) or a bound Dynamo "
                    f"derived); mark the dimension with a larger max")
            real[s] = v
        return real

    def _padded_inputs(self, args, key):
        values = dict(zip(self.syms, key))
        out = []
        for a, shape in zip(args, self.shapes):
            if isinstance(shape, list) and isinstance(a, torch.Tensor):
                target = [int(e.subs(values)) for e in shape]
                if list(a.shape) != target:
                    a = _pad(a, target)
                out.append(a)
            elif isinstance(a, torch.Tensor):
                out.append(a)
        return out

    def _size_tensors(self, real, device):
        out = []
        for i, s in enumerate(self.syms):
            t = self._sizes.get((i, real[s]))
            if t is None:
                t = torch.tensor(real[s], dtype=torch.int64, device=device)
                if len(self._sizes) < 4096:
                    self._sizes[(i, real[s])] = t
            out.append(t)
        return out

    def _device(self, args):
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "tpu":
                return a.device
        return torch.device("tpu")

    def _build(self, key, args, real):
        """The program for a bucket: a CompiledGraph whose recording call runs the
        graph through the MaskedInterpreter on the padded inputs (recorded by the
        Defer & Fuse recorder like any graph, then called directly)."""
        from .graph_runner import CompiledGraph
        values = dict(zip(self.syms, key))
        gm, shapes, syms, exact = self.gm, self.shapes, self.syms, set(self._exact)
        n_tensors = sum(1 for a in args if isinstance(a, torch.Tensor))
        checks = dict(host=[], device=[])

        def padded_graph(*flat):
            tensors, real_sizes = list(flat[:n_tensors]), flat[n_tensors:]
            full = []
            it = iter(tensors)
            for shape in shapes:
                if isinstance(shape, sympy.Basic):
                    full.append(int(shape.subs(values)))
                else:
                    full.append(next(it))
            interp = masked_trace.MaskedInterpreter(gm, values, dict(zip(syms, real_sizes)),
                                                    frozenset(exact))
            outs = interp.compact_outputs(interp.run(*full))
            checks["host"] = interp.host_checks
            checks["device"] = [msg for _, msg in interp.device_checks]
            results = [o for o in outs if isinstance(o, torch.Tensor)]
            if interp.device_checks:
                results.append(torch.stack([flag for flag, _ in interp.device_checks]))
            return results

        graph = CompiledGraph(gm, self.kind, self._record)
        self._record = graph.record
        if graph._split is not None:
            # its CPU prologue maps the graph's own inputs, not the padded ones
            return self._give_up(key, "a graph with CPU scalar work that could not be split off")
        graph._fn = padded_graph
        entry = (graph, checks)
        self._programs[key] = entry
        return entry

    def _give_up(self, key, why):
        # One graph, one answer: the masking rules do not depend on the bucket, so a
        # graph that fails at one bucket runs per size from now on.
        if self.why_per_size is None:
            self.why_per_size = why
            self._note_why(why)
            self._note("bucketed_graphs", -1)
            self._note("per_size_graphs")
        self._programs[key] = False
        return False

    def _run(self, entry, key, args, real):
        graph, checks = entry
        names = {str(s): v for s, v in real.items()}
        for cond, msg in checks["host"]:
            if not bool(cond.subs(real)):
                raise IndexError(msg.format(**names))
        inputs = self._padded_inputs(args, key) + self._size_tensors(real, self._device(args))
        first = not checks.get("ran")
        try:
            results = graph(inputs)
        except Exception as e:
            if not first:
                raise
            if not isinstance(e, masked_trace.Unsupported):
                # the graph failed at the bucket's sizes (a masking rule's gap): the
                # per-size path runs it as traced
                self._give_up(key, f"running at sizes {key} failed: {type(e).__name__}: "
                                   f"{str(e)[:3000]}")
                return None
            pin = e.pin & set(self.syms)
            if pin and not pin <= self._exact:
                # sizes used as values run exact, the other symbols keep their buckets
                self._exact |= pin
                self._programs.clear()
                self._note_why(f"exact sizes for {sorted(map(str, pin))}: {str(e)[:3000]}")
                return None
            self._give_up(key, str(e)[:3000])
            return None
        args.clear()
        if first:  # the recording call found the checks; a bucket's checks are its graph's
            checks["ran"] = True
            self._note("bucket_programs")
            for cond, msg in checks["host"]:
                if not bool(cond.subs(real)):
                    raise IndexError(msg.format(**names))
        self._note("padded_calls")
        device_checks = checks["device"]
        if device_checks:
            # Indices a real run would reject: a real run raises at its next sync;
            # here the flags come back with the results and are read now.
            flags = results[-1].cpu().tolist()
            results = results[:-1]
            for bad, msg in zip(flags, device_checks):
                if bad:
                    raise IndexError(msg.format(**names))
        results = iter(results)
        outs = []
        for shape in self.out_shapes:
            if isinstance(shape, list):
                t = next(results)
                for d, e in enumerate(shape):
                    if not e.is_number:
                        t = t.narrow(d, 0, int(e.subs(real)))
                outs.append(t)
            elif isinstance(shape, sympy.Basic):
                outs.append(int(shape.subs(real)))
            else:
                outs.append(None)
        return outs


def _per_size_graph(gm, kind, record):
    from .graph_runner import CompiledGraph
    return CompiledGraph(gm, kind, record)


def _pad(t, target):
    """t zero-padded at the end of each dim to `target`, through the host (see the
    module note); the result lives on t's device."""
    host = t.detach().to("cpu")
    buf = host.new_zeros(target)
    buf[tuple(slice(0, s) for s in host.shape)] = host
    return buf.to(t.device)

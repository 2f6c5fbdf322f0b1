"""Defer & Fuse's dynamic buckets: variable-length inference stays fused.

A Defer & Fuse trace records concrete sizes (a view of [4, 37, 64], arange(37)),
so each new length misses the fused-program cache and compiles its own program.
This module is offered every such miss (csrc/aten/deferred_buckets.cc) and runs
the trace as the padded program of its length's bucket instead, with the
compiled mode's machinery: the trace becomes an FX graph whose sizes are
symbolic, and bucketed_graph.BucketedGraph runs it (masked_trace.py masks the
padding out of every reduction, softmax, norm, cumulative op, sort and index,
one set of rules for both modes).

Sizes are never guessed from one trace. Every integer of a trace (view sizes,
slice bounds, the integer arguments of ops, result sizes, input shapes) is a
position in a vector; traces of one structure (the same ops, dtypes, non-integer
arguments and connections) are compared:
 - a template is learnt from two traces at two different sizes: a position whose
   value is equal in both is static; one that differs is `a * s + b` of the one
   dynamic size s (the input dim that changes least: the length, not batch *
   length), a and b integers fitted from the two -- so a static dim that happens to equal s in one trace is
   static, because it does not change in the other;
 - a third trace at a third size must match the template exactly (confirmation);
 - from then on every trace of that structure is instantiated at its own s and
   compared position by position with the concrete trace (every op, int argument
   and shape: the structure key holds the rest). Only a trace that matches runs
   padded; any other runs as before, one fused program for its sizes.
Outputs (the storages the trace wrote that are still alive) are the padded
program's results sliced back to their real sizes on the host and uploaded:
the user's tensors get buffers of their own sizes.

A size that recurs is promoted: once a trace has run padded
TORCH_TPU_DEFER_BUCKETS_HOT times at one size, its next run at that size is declined
and compiles its own exact-size fused program, which the cache then serves with no
hook, no padding and no host slicing. So the bucketed path's per-flush cost (the
trace converted and verified here, inputs padded and outputs sliced on the host) is
paid a bounded number of times per size, and a long run over recurring lengths
converges to per-size speed with programs only for the lengths that recur.

Not offered: traces with random ops, traces recorded by autograd's backward
(training steps run per size, exact), compiled graphs' captures. Off with
TORCH_TPU_DEFER_BUCKETS=0; the bucket sizes are torch_tpu.set_dynamic_buckets'.
"""
import math
import operator
import threading

import torch

from .. import settings
from .tally import Tally

_lock = threading.Lock()
_tally = Tally("offered", "bucketed", "learning", "unverified", "unsupported", "promoted")
_families = {}
_MAX_FAMILIES = 256


class _Decline(Exception):
    pass


def stats():
    """offered (fused-cache misses seen), bucketed (ran padded), learning (no
    confirmed template yet), unverified (did not match the template: ran per size),
    unsupported (a trace that cannot be expressed), promoted (a recurring size given
    its own program: TORCH_TPU_DEFER_BUCKETS_HOT), reasons (newest last)."""
    d, reasons = _tally.snapshot()
    d["reasons"] = reasons
    with _lock:
        d["families"] = len(_families)
    return d


def reset():
    """Forgets every template and the statistics."""
    _tally.reset()
    with _lock:
        _families.clear()


def _count(key, why=None):
    _tally.count(key, why=why)


def enabled():
    return bool(settings.get("TORCH_TPU_DEFER_BUCKETS"))


# -- the trace as an FX-level program with integer holes ------------------------------

def _contiguous(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def _numel(shape):
    return math.prod(shape)


def _dense(sizes, strides):
    """Row-major, size-1 dims aside (their strides are arbitrary)."""
    return all(n == 1 or st == c for n, st, c in zip(sizes, strides, _contiguous(sizes)))


def _chain(N, sizes, strides, offset):
    """View steps from a storage's value in its natural (row-major) shape N to the
    view (sizes, strides, offset): reshape into a grid whose dims refine both, then
    slices, selects, a permute, unsqueezes and an expand. Raises _Decline for views
    that are no such chain (overlapping, merged across a slice...)."""
    sizes, strides = list(sizes), list(strides)
    M = _numel(N)
    if offset == 0 and _numel(sizes) == M and _dense(sizes, strides):
        return [] if list(sizes) == list(N) else [("view", sizes)]
    real = [d for d in range(len(sizes)) if sizes[d] != 1 and strides[d] != 0]
    order = sorted(real, key=lambda d: -strides[d])
    if any(strides[a] <= strides[b] for a, b in zip(order, order[1:])) or any(strides[d] < 0 for d in real):
        raise _Decline("an overlapping view")
    bounds = {strides[d] for d in real} | {st for n, st in zip(N, _contiguous(N)) if n != 1} | {1}
    bounds = sorted(bounds, reverse=True)
    if M % bounds[0] or any(a % b for a, b in zip(bounds, bounds[1:])):
        raise _Decline("a view whose strides do not nest")
    C = [M // bounds[0]] + [a // b for a, b in zip(bounds, bounds[1:])]
    off, rem = [], offset
    for st in bounds:
        off.append(rem // st)
        rem -= off[-1] * st
    owner = {strides[d]: d for d in real}
    steps = [] if C == list(N) else [("view", C)]
    selects = []
    for i, st in enumerate(bounds):
        if st in owner:
            d = owner[st]
            if off[i] + sizes[d] > C[i]:
                raise _Decline("a view merged across dims")
            if off[i] != 0 or sizes[d] != C[i]:
                steps.append(("slice", i, off[i], off[i] + sizes[d]))
        else:
            if off[i] >= C[i]:
                raise _Decline("a view outside its storage")
            selects.append(i)
    for i in reversed(selects):
        steps.append(("select", i, off[i], C[i]))
    kept = [owner[st] for st in bounds if st in owner]  # layout dims, outermost first
    perm = [kept.index(d) for d in sorted(real)]
    if perm != sorted(perm):
        steps.append(("permute", perm))
    for d in range(len(sizes)):
        if d not in real:
            steps.append(("unsqueeze", d))
    if any(strides[d] == 0 and sizes[d] != 1 for d in range(len(sizes))):
        steps.append(("expand", sizes))
    return steps


def _whole_storage(name, sizes, strides, offset):
    """Raises _Decline unless the view (sizes, strides, offset) starts its storage
    and is row-major: an op writing it replaces the storage's value."""
    if offset != 0 or not _dense(sizes, strides):
        raise _Decline(f"{name} writes part of a storage")


def _out_factory(op, sizes, dtype, device, args, kwargs):
    out = torch.empty(sizes, dtype=dtype, device=device)
    op(*args, **kwargs, out=out)
    return out


class _Program:
    """A trace in FX-level form: `ins` (instructions over value ids, integers as
    holes into `ints`), `skey` (everything but the integers), params used, outputs."""

    def __init__(self):
        self.ints = []
        self.kinds = []        # per integer: "size" (may be symbolic) or "value" (must be static)
        self.key = []
        self.ins = []          # (target, args, kwargs, n_results)
        self.values = 0
        self.params = {}       # param id -> (value id, natural shape hole ids, dtype)
        self.param_order = []
        self.outputs = []      # value id per output slot

    def hole(self, v, kind="size"):
        self.ints.append(int(v))
        self.kinds.append(kind)
        return ("i", len(self.ints) - 1)

    def new_value(self):
        self.values += 1
        return ("v", self.values - 1)


def _op(name, overload):
    ns, _, op = name.partition("::")
    try:
        return getattr(getattr(getattr(torch.ops, ns), op), overload or "default")
    except AttributeError:
        raise _Decline(f"no op {name}.{overload}")


def _const(p, v, kind="size"):
    """A non-tensor argument: ints become holes, the rest is part of the key."""
    if isinstance(v, bool) or v is None or isinstance(v, (float, str, torch.dtype, torch.device,
                                                           torch.layout, torch.memory_format)):
        p.key.append(repr(v))
        return v
    if isinstance(v, int):
        return p.hole(v, kind)
    if isinstance(v, (list, tuple)):
        p.key.append(f"[{len(v)}")
        return [_const(p, x, kind) for x in v]
    raise _Decline(f"an argument of type {type(v).__name__}")


class _Converter:
    def __init__(self, desc):
        self.nodes, self.params_desc, self.out_desc, self.device, _ = desc
        self.p = _Program()
        self.slot_val = {}   # slot id -> (value id, natural shape list of ints, dtype)
        # A parameter's shape: of the whole, row-major views the trace reads it
        # through, the one of most dims (the user's [b, s], not a flattened [b * s]).
        self.param_shape = {}
        for pid, kind in enumerate(self.params_desc):
            if kind[0] == "b" and kind[3] is not None and _numel(kind[3]) == kind[1]:
                self.param_shape[pid] = list(kind[3])  # as uploaded: the user's shape
        for _, _, args, _, _, _ in self.nodes:
            for a in args:
                for r in (a[1] if a is not None and a[0] == "L" else [a]):
                    if r is None or r[0] != "T" or r[1]:
                        continue
                    _, _, pid, sizes, strides, offset, _ = r
                    kind = self.params_desc[pid]
                    if kind[0] == "b" and kind[3] is None and offset == 0 and _numel(sizes) == kind[1] and \
                            _dense(sizes, strides) and len(sizes) > len(self.param_shape.get(pid, [])):
                        self.param_shape[pid] = [n for n in sizes]

    def _param(self, pid, sizes, strides, offset, dtype):
        p = self.p
        if pid in p.params:
            return p.params[pid]
        kind = self.params_desc[pid]
        if kind[0] != "b":
            raise _Decline("a host value read as a tensor")
        if kind[2] != dtype:
            raise _Decline("a dtype view of a parameter")
        shape = self.param_shape.get(pid, [kind[1]])
        v = p.new_value()
        p.key.append(f"P{pid}:{dtype}:{len(shape)}")
        holes = [p.hole(x) for x in shape]
        entry = (v, shape, dtype, holes)
        p.params[pid] = entry
        p.param_order.append(pid)
        return entry

    def _emit(self, target, args, kwargs=None, results=1):
        v = self.p.new_value()
        self.p.ins.append((v, target, args, kwargs or {}, results))
        return v

    def _read(self, ref):
        p = self.p
        if ref is None:
            p.key.append("None")
            return None
        if ref[0] == "H":
            p.key.append(f"H{ref[1]!r}:{ref[2]}")
            return ref[1]
        _, internal, vid, sizes, strides, offset, dtype = ref
        if internal:
            if vid not in self.slot_val:
                raise _Decline("a slot read before it is written")
            v, shape, sdtype = self.slot_val[vid]
            if sdtype != dtype:
                raise _Decline("a dtype view of a storage")
            p.key.append(f"S{vid}")
        else:
            v, shape, sdtype, _ = self._param(vid, sizes, strides, offset, dtype)
            p.key.append(f"R{vid}")
        for step in _chain(shape, sizes, strides, offset):
            kind = step[0]
            p.key.append(kind)
            if kind == "view":
                v = self._emit(torch.ops.aten.view.default, (v, [p.hole(x) for x in step[1]]))
            elif kind == "slice":
                p.key.append(step[1])
                v = self._emit(torch.ops.aten.slice.Tensor, (v, step[1], p.hole(step[2]), p.hole(step[3])))
            elif kind == "select":
                # the index, and its distance from the end of the dim: a symbolic
                # index becomes a negative one (x[:, -1]), which the masking rule
                # counts from the real end
                p.key.append(step[1])
                v = self._emit(torch.ops.aten.select.int,
                               (v, step[1], ("sel", p.hole(step[2], "value"), p.hole(step[3] - step[2], "value"))))
            elif kind == "permute":
                p.key.append(tuple(step[1]))
                v = self._emit(torch.ops.aten.permute.default, (v, list(step[1])))
            elif kind == "unsqueeze":
                p.key.append(step[1])
                v = self._emit(torch.ops.aten.unsqueeze.default, (v, step[1]))
            else:
                v = self._emit(torch.ops.aten.expand.default, (v, [p.hole(x) for x in step[1]]))
        return v

    def _arg(self, a, sa):
        if a is None:
            self.p.key.append("None")
            return None
        kind = a[0]
        if kind in ("T", "H"):
            return self._read(a)
        if kind == "L":
            self.p.key.append(f"L{len(a[1])}")
            return [self._read(r) for r in a[1]]
        if kind == "S" and isinstance(a[1], int) and not isinstance(a[1], bool):
            # masked_trace refuses (or runs exact) a symbolic size used as a Scalar value
            self.p.key.append("S")
            return self.p.hole(a[1], "size")
        if kind == "S" or kind == "Q":
            self.p.key.append(f"{kind}{a[1]!r}")
            return a[1]
        # PyTorch types size-like integers SymInt; any other int is a value (an index...)
        return _const(self.p, a[1], "size" if "SymInt" in str(sa.type) else "value")

    def _call_args(self, schema, args, skip=()):
        """The converted arguments of a call, positional and keyword as `schema` takes
        them, leaving out the positions in `skip`."""
        pos, kw = [], {}
        for i, (sa, a) in enumerate(zip(schema.arguments, args)):
            if i in skip:
                continue
            v = self._arg(a, sa)
            if sa.kwarg_only:
                kw[sa.name] = v
            else:
                pos.append(v)
        return pos, kw

    def _factory_out(self, op, schema, args, outs, out_args):
        """An out= op with no tensor input (arange(n) reaches us as arange.start_out):
        a fresh tensor of the out argument's shape, filled by the op."""
        p = self.p
        if len(outs) != 1 or len(out_args) != 1:
            raise _Decline(f"{schema.name} writes several out= arguments")
        ref = args[out_args[0]]
        if any(a is not None and a[0] in ("T", "L", "H") for i, a in enumerate(args) if i not in out_args):
            return self._functional_out(op, schema, args, outs, out_args[0])
        _, internal, sid, sizes, strides, offset, dtype = ref
        _whole_storage(schema.name, sizes, strides, offset)
        pos, kw = self._call_args(schema, args, skip=out_args)
        p.key.append(f"F{dtype}")
        shape = [p.hole(x) for x in sizes]
        v = self._emit(_out_factory, (op, shape, dtype, f"tpu:{self.device}", tuple(pos), kw))
        self.slot_val[outs[0][1]] = (v, list(sizes), dtype)
        p.key.append(f"W{outs[0][1]}")

    def _functional_out(self, op, schema, args, outs, k):
        """An out= op over tensors (where.self_out): its functional overload (the same
        arguments but out), converted to the out argument's dtype."""
        p = self.p
        ns, _, name = schema.name.partition("::")
        packet = getattr(getattr(torch.ops, ns), name)
        names = [a.name for a in schema.arguments if not a.is_out]
        fn = None
        for ov in packet.overloads():
            cs = getattr(packet, ov)._schema
            if not cs.is_mutable and [a.name for a in cs.arguments] == names and len(cs.returns) == 1:
                fn = getattr(packet, ov)
                break
        if fn is None:
            raise _Decline(f"{schema.name} has no functional form")
        _, internal, sid, sizes, strides, offset, dtype = args[k]
        _whole_storage(schema.name, sizes, strides, offset)
        pos, kw = self._call_args(schema, args, skip=(k,))
        p.key.append(f"F{fn}:{dtype}")
        v = self._emit(fn, tuple(pos), kw)
        v = self._emit(torch.ops.aten._to_copy.default, (v,), {"dtype": dtype})
        self.slot_val[outs[0][1]] = (v, list(sizes), dtype)
        p.key.append(f"W{outs[0][1]}")
        for x in sizes:
            p.hole(x)

    def convert(self):
        p = self.p
        for name, overload, args, outs, ins, precision in self.nodes:
            op = _op(name, overload)
            schema = op._schema
            p.key.append(f"{name}.{overload}#{precision}")
            writes = [o for o in outs if o[0] == "w"]
            out_args = [i for i, sa in enumerate(schema.arguments) if sa.is_out]
            if writes and out_args and not name.endswith("_"):
                self._factory_out(op, schema, args, outs, out_args)
                continue
            if writes:
                # an in-place op on a whole storage: its functional form's result
                # is the storage's new value
                if len(outs) != 1 or not name.endswith("_") or not args or args[0] is None or \
                        args[0][0] != "T":
                    raise _Decline(f"{name} writes a storage")
                ref = args[0]
                if tuple(ins[writes[0][2]]) != (ref[1], ref[2]):
                    raise _Decline(f"{name} writes an argument other than self")
                op = _op(name[:-1] if name != "aten::copy_" else "aten::copy", overload)
                schema = op._schema
            pos, kw = self._call_args(schema, args)
            if writes:
                _, internal, sid, sizes, strides, offset, dtype = args[0]
                target_slot = writes[0][1]
                storage_n = (self.slot_val[sid][1] if internal else self.p.params[sid][1])
                if _numel(sizes) != _numel(storage_n):
                    raise _Decline(f"{name} writes part of a storage")
                _whole_storage(name, sizes, strides, offset)
                v = self._emit(op, tuple(pos), kw)
                self.slot_val[target_slot] = (v, list(sizes), dtype)
                p.key.append(f"W{target_slot}")
                continue
            v = self._emit(op, tuple(pos), kw, results=len(outs))
            multi = len(schema.returns) != 1 or str(schema.returns[0].type).startswith("List")
            for j, o in enumerate(outs):
                if o[0] == "x":
                    p.key.append("x")
                    continue
                _, sid, dtype, sizes, strides = o
                r = self._emit(operator.getitem, (v, j)) if multi else v
                shape = list(sizes)
                for x in sizes:  # the result's sizes are integer positions too
                    p.hole(x)
                if strides and list(strides) != _contiguous(sizes):
                    order = sorted(range(len(sizes)), key=lambda d: -strides[d])
                    if [strides[d] for d in order] != _contiguous([sizes[d] for d in order]):
                        raise _Decline("a result with a non-dense layout")
                    r = self._emit(torch.ops.aten.permute.default, (r, order))
                    shape = [sizes[d] for d in order]
                    p.key.append(("perm", tuple(order)))
                p.key.append(f"N{sid}:{dtype}:{len(sizes)}")
                self.slot_val[sid] = (r, shape, dtype)
        for sid, nbytes in self.out_desc:
            if sid not in self.slot_val:
                raise _Decline("an output the trace does not define")
            v, shape, dtype = self.slot_val[sid]
            if _numel(shape) * dtype.itemsize != nbytes:
                raise _Decline("an output whose storage is not its value")
            p.outputs.append((v, shape, dtype))
            p.key.append(f"O{sid}")
        p.skey = "\x1f".join(map(str, p.key))
        return p


# -- templates -------------------------------------------------------------------------

def _fit(p1, p2, base):
    """(a, b) per integer position from two traces whose position `base` (s) differs."""
    s1, s2 = p1.ints[base], p2.ints[base]
    tmpl = []
    for x1, x2 in zip(p1.ints, p2.ints):
        if x1 == x2:
            tmpl.append((0, x1))
            continue
        a, r = divmod(x2 - x1, s2 - s1)
        if r:
            return None
        tmpl.append((a, x1 - a * s1))
    return tmpl


def _matches(tmpl, ints, base):
    s = ints[base]
    return all(a * s + b == x for (a, b), x in zip(tmpl, ints))


class _Family:
    """Traces of one structure: their template and, once confirmed, the bucketed graph."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []        # programs at distinct sizes while learning
        self.base = None
        self.tmpl = None
        self.confirmed = False
        self.graph = None
        self.dead = None      # why this structure never runs padded
        self.runs = {}        # s -> padded runs at that size (promotion to its own program)

    def offer(self, p, desc):
        if self.dead:
            _count("unsupported")
            return None
        if not self.confirmed:
            return self._learn(p, desc)
        if not _matches(self.tmpl, p.ints, self.base):
            _count("unverified", f"a trace that does not match its template at s={p.ints[self.base]}")
            return None
        s = p.ints[self.base]
        hot = settings.get("TORCH_TPU_DEFER_BUCKETS_HOT")
        if hot and self.runs.get(s, 0) >= hot:
            # Recurring: this run compiles its own exact-size program (declined here),
            # which the fused cache serves from now on without offering it again.
            self.runs.pop(s)
            _count("promoted")
            return None
        out = self._run(p, desc)
        if out is not None:
            self.runs[s] = self.runs.get(s, 0) + 1
        return out

    def _learn(self, p, desc):
        base = _base_position(p, self.seen[-1]) if self.seen else None
        if self.tmpl is not None and _matches(self.tmpl, p.ints, self.base) and \
                p.ints[self.base] not in [q.ints[self.base] for q in self.seen]:
            self.confirmed = True
            return self._run(p, desc)
        if base is not None:
            tmpl = _fit(self.seen[-1], p, base)
            if tmpl is not None:
                self.base, self.tmpl = base, tmpl
        self.seen = (self.seen + [p])[-2:]
        _count("learning")
        return None

    def _run(self, p, desc):
        if self.graph is None:
            try:
                self.graph = _Bucketed(p, self.tmpl, self.base, desc[3])
            except _Decline as e:
                self.dead = str(e)
                _count("unsupported", self.dead)
                return None
        try:
            out = self.graph(p, desc)
        except _Decline as e:
            self.dead = self.graph.bg.why_per_size or str(e)
            _count("unsupported", self.dead)
            return None
        except Exception as e:  # noqa: BLE001  (an index error...): the per-size run reports it
            _count("unverified", f"{type(e).__name__}: {str(e)[:300]}")
            return None
        _count("bucketed")
        return out


def _base_position(p2, p1):
    """The position of s: of the input (parameter) dims whose size differs, the one
    that changes least (the length, not a flattened batch * length), first if tied."""
    best = None
    for pid in p2.param_order:
        if pid not in p1.params:
            return None
        for (_, k2), (_, k1) in zip(p2.params[pid][3], p1.params[pid][3]):
            if k1 != k2:
                return None
            delta = abs(p1.ints[k1] - p2.ints[k2])
            if delta and (best is None or delta < best[0]):
                best = (delta, k2)
    return None if best is None else best[1]


# -- the bucketed graph ------------------------------------------------------------------

class _PerSize:
    record = None

    def __call__(self, args):
        raise _Decline("the graph cannot run padded")


class _Bucketed:
    """The template as an FX graph with one symbolic size, run by BucketedGraph."""

    def __init__(self, p, tmpl, base, device):
        self.base = base
        from . import buckets
        from .bucketed_graph import BucketedGraph
        self.gm = _build_graph(p, tmpl, base)
        self.bg = BucketedGraph(self.gm, "inference", buckets.get_dynamic_buckets(), lambda rec: _PerSize(),
                                counted=False)
        if self.bg.why_per_size:
            raise _Decline(self.bg.why_per_size)

    def __call__(self, p, desc):
        tensor = desc[4]
        args = []
        for pid in p.param_order:
            _, shape, _, _ = p.params[pid]
            args.append(tensor(pid).view(shape))
        args.append(p.ints[self.base])
        outs = self.bg(args)
        return [_host_exact(o, shape) for o, (_, shape, _) in zip(outs, p.outputs)]


def _host_exact(o, shape):
    """The real-size result as a tpu tensor of its own: the padded storage read to
    the host, the view taken there, uploaded (no device program per size)."""
    full = o.as_strided([o.untyped_storage().nbytes() // o.element_size()], [1], 0)
    host = full.cpu().as_strided(o.shape, o.stride(), o.storage_offset()).contiguous()
    return host.reshape(shape).to(o.device)


def _build_graph(p, tmpl, base):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, DimDynamic
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    from torch._dynamo.source import ConstantSource

    g = torch.fx.Graph()
    env = {}
    phs = []
    for pid in p.param_order:
        v = p.params[pid][0]
        env[v] = g.placeholder(f"p{pid}")
        phs.append(pid)
    s_node = g.placeholder("s")
    exprs = {}

    def hole(k):
        a, b = tmpl[k]
        if a == 0:
            return b
        if p.kinds[k] != "size":
            raise _Decline("a dynamic size used as an integer value")
        e = exprs.get((a, b))
        if e is None:
            e = s_node if a == 1 else g.call_function(operator.mul, (s_node, a))
            if b:
                e = g.call_function(operator.add, (e, b))
            exprs[(a, b)] = e
        return e

    def sub(x):
        if isinstance(x, tuple) and len(x) == 3 and x[0] == "sel":
            (_, i), (_, d) = x[1], x[2]
            if tmpl[i][0] == 0:
                return tmpl[i][1]
            if tmpl[d][0] == 0:
                return -tmpl[d][1]
            raise _Decline("a select at a position that moves with the size")
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "v":
            return env[x]
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "i":
            return hole(x[1])
        if isinstance(x, list):
            return [sub(y) for y in x]
        if isinstance(x, tuple):
            return tuple(sub(y) for y in x)
        if isinstance(x, dict):
            return {k: sub(y) for k, y in x.items()}
        return x

    for v, target, args, kwargs, _ in p.ins:
        env[v] = g.call_function(target, sub(args), {k: sub(x) for k, x in kwargs.items()})
    g.output([env[v] for v, _, _ in p.outputs])
    gm = torch.fx.GraphModule(torch.nn.Module(), g)

    hint = p.ints[base]
    shape_env = ShapeEnv()
    sym = shape_env.create_symbol(hint, ConstantSource("dnf_s"), dynamic_dim=DimDynamic.DYNAMIC)
    s = shape_env.create_symintnode(sym, hint=hint)
    mode = FakeTensorMode(shape_env=shape_env)

    def dim(k):
        a, b = tmpl[k]
        return b if a == 0 else a * s + b

    with mode:
        fakes = []
        for pid in phs:
            _, shape, dtype, holes = p.params[pid]
            fakes.append(torch.empty([dim(k) for _, k in holes], dtype=dtype, device="tpu"))
    try:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes, s)
    except Exception as e:  # an op whose meta kernel refuses the symbolic size
        raise _Decline(f"symbolic propagation failed: {type(e).__name__}: {str(e)[:300]}")
    return gm


# -- the hook ----------------------------------------------------------------------------

def hook(desc):
    """Called by the core on a fused-cache miss: the outputs' tensors, or None."""
    if not enabled():
        return None
    _count("offered")
    try:
        p = _Converter(desc).convert()
        with _lock:
            fam = _families.get(p.skey)
            if fam is None:
                if len(_families) >= _MAX_FAMILIES:
                    _families.clear()
                fam = _families[p.skey] = _Family()
        with fam.lock:  # one thread at a time per structure (BucketedGraph is not thread-safe)
            return fam.offer(p, desc)
    except _Decline as e:
        _count("unsupported", str(e))
        return None
    except Exception as e:  # noqa: BLE001  never fail a flush: the trace then runs as before
        _count("unsupported", f"{type(e).__name__}: {str(e)[:300]}")
        return None

"""Traces a symbolic-shape ATen graph at padded sizes, masking the padding out.

The graph handed to the backend under `dynamic=True` / `mark_dynamic` has symbolic
sizes (node.meta["val"] shapes hold SymInts). To run it at a bucket, every input
is padded to the bucket along its symbolic dims and every symbol takes the bucket's
value, so the graph's own shape arithmetic computes padded shapes. What padding
must not change is a value: `MaskedInterpreter` runs the graph node by node under
make_fx and keeps, beside each tensor, a boolean mask broadcastable to it that is
true at real positions. The invariant: at real positions a padded value equals the
unpadded one. Ops that only combine values at the same position (pointwise ops,
linear layers over a static dim, layer norm over the hidden dim) keep it by
themselves; an op that reduces over, sorts along or contracts a padded dim first
replaces the padding with the identity of its reduction (0 for sums and matmuls,
-inf for max/softmax, ...), with `where`, so that garbage (even NaN) in pad
positions never reaches a real one. The real sizes are runtime inputs (0-dim
int64 tensors): one program serves every size of a bucket.

Along every padded dim the real positions are a prefix whose length is the dim's
traced size evaluated at the real sizes (s, or s + 1 after a cat, s - 1 after
x[:, :-1]); a cat along a padded dim keeps that layout by moving each piece's real
part right after the previous one's. A flattened view of padded dims (size s0*s1)
is the exception: its mask is carried, and ops that need a prefix refuse it.

An op with no rule here that touches a padded dim raises Unsupported and the
graph runs per size instead (exact by construction). Conservative on purpose:
slicing from the end of a padded dim (a negative or symbolic start), a split
along one, flip/roll/scatter, and outputs whose symbolic dims are products are
all Unsupported.
"""
import operator

import sympy
import torch

aten = torch.ops.aten


class Unsupported(Exception):
    """The graph cannot run padded (the reason is the message). `pin`: symbols that
    would make it work if they ran at their exact size instead of a bucket."""

    def __init__(self, msg, pin=()):
        super().__init__(msg)
        self.pin = frozenset(pin)


def canonical(e):
    """e, or the one symbol it equals (Dynamo's shape arithmetic leaves forms like
    (s0**2)//s0 unsimplified): tested on a few assignments of its symbols."""
    if e.is_number or isinstance(e, sympy.Symbol):
        return e
    free = sorted(e.free_symbols, key=str)
    trials = [{s: v for s, v in zip(free, vals)}
              for vals in ([3 + 2 * i for i in range(len(free))], [7 + 5 * i for i in range(len(free))],
                           [64 + 13 * i for i in range(len(free))])]
    for s in free:
        try:
            if all(int(e.subs(t)) == t[s] for t in trials):
                return s
        except (TypeError, ValueError):
            return e
    return e


def _expr(d):
    return canonical(d.node.expr) if isinstance(d, torch.SymInt) else sympy.Integer(int(d))


def _symbolic_node(a):
    v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) and bool(v.node.expr.free_symbols)


# Scalar arguments that may take a symbolic size: they shape the result, and the
# bucket's value is the right one there.
_SHAPE_SCALARS = {"arange.default": {"end"}, "arange.start": {"start", "end"},
                  "arange.start_step": {"start", "end", "step"}}


def _check_value_args(n, exact):
    """A symbolic size used as a value (x / x.shape[1], a fill value) would be the
    bucket's size in the padded program, not the real one."""
    t = n.target
    name = f"{t._schema.name.split('::')[-1]}.{t._overloadname}"
    allowed = _SHAPE_SCALARS.get(name, ())
    for arg, a in list(zip(t._schema.arguments, n.args)) + [
            (next((x for x in t._schema.arguments if x.name == k), None), v) for k, v in n.kwargs.items()]:
        if arg is None or arg.name in allowed:
            continue
        ty = str(arg.type)
        if ty in ("Tensor", "Scalar", "float", "number", "Scalar?", "float?", "bool") and \
                _symbolic_node(a) and not a.meta["val"].node.expr.free_symbols <= exact:
            raise Unsupported(f"{t} uses a symbolic size as a value ({arg.name})",
                              pin=a.meta["val"].node.expr.free_symbols)


def _is_sum(e):
    """s0 + s1 + 2: the size of a cat along padded dims, whose real positions the
    rules keep a prefix (a product of symbols, a flattened view, they do not)."""
    return isinstance(e, sympy.Add) and all(isinstance(a, sympy.Symbol) or a.is_Integer for a in e.args)


def _fold(f, parts):
    out = parts[0]
    for p in parts[1:]:
        out = f(out, p)
    return out


def _is_symbolic(d):
    return isinstance(d, torch.SymInt) and not _expr(d).is_number


def _and(a, b):
    if a is None or a is b:
        return b
    if b is None:
        return a
    return torch.logical_and(a, b)


def _full_rank(m, rank):
    """A mask lifted to `rank` dims (leading size-1 dims), as broadcasting does."""
    while m.dim() < rank:
        m = m.unsqueeze(0)
    return m


def _padded_dims(m):
    return [d for d in range(m.dim()) if m.shape[d] != 1] if m is not None else []


def _fill(x, m, value):
    return x if m is None else torch.where(m, x, torch.full((), value, dtype=x.dtype, device=x.device))


def _low(dtype):
    return -float("inf") if dtype.is_floating_point else torch.iinfo(dtype).min if dtype != torch.bool else False


def _high(dtype):
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max if dtype != torch.bool else True


def _norm_dims(dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(d % rank if rank else 0 for d in dims)


def _reduce_mask(m, dims, keepdim):
    """The mask of a reduction's result: a result position is real when some real
    position was reduced into it (for masks that are products over dims, the mask
    restricted to the kept dims)."""
    if m is None:
        return None
    r = m
    for d in dims:
        if r.shape[d] != 1:
            r = r.any(d, keepdim=True)
    if not keepdim:
        for d in reversed(dims):
            r = r.squeeze(d)
    return r


# Ops that keep each position where it is and only read the same position of their
# inputs (beyond those tagged pointwise).
_SAME_POSITION = {
    aten.clone.default, aten.alias.default, aten.detach.default, aten._to_copy.default,
    aten.lift_fresh_copy.default, aten.where.self, aten.masked_fill.Scalar,
    aten.masked_fill.Tensor, aten.copy.default, aten.gelu.default, aten.dropout.default,
    aten.native_dropout.default, aten.clamp.default, aten.contiguous.default,
    # the same value everywhere: real wherever the input is
    aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
    aten.empty_like.default, aten.floor_divide.default,
}

_SIZE_QUERIES = {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
                 aten.sym_storage_offset.default}

_SUM_LIKE = {aten.sum.dim_IntList: 0, aten.sum.default: 0, aten.prod.dim_int: 1, aten.prod.default: 1,
             aten.any.dim: False, aten.any.dims: False, aten.any.default: False,
             aten.all.dim: True, aten.all.dims: True, aten.all.default: True}
_MAX_LIKE = {aten.amax.default: _low, aten.amin.default: _high}
_ARG_LIKE = {aten.argmax.default: _low, aten.argmin.default: _high}
_MAX_DIM = {aten.max.dim: _low, aten.min.dim: _high}
_SOFTMAX = {aten._softmax.default, aten._log_softmax.default, aten.softmax.int, aten.log_softmax.int,
            aten._safe_softmax.default}
_CUMULATIVE = {aten.cumsum.default, aten.cumprod.default, aten.cummax.default, aten.cummin.default,
               aten.logcumsumexp.default}


class MaskedInterpreter(torch.fx.Interpreter):
    """Runs a symbolic-shape ATen graph on padded inputs (see the module note).

    sym_values: symbol -> the bucket size it runs at; real_sizes: symbol -> a 0-dim
    int64 tensor holding the real size (a program input)."""

    def __init__(self, gm, sym_values, real_sizes, exact=frozenset()):
        super().__init__(gm)
        self.exact = exact  # symbols that run at their real size (may be used as values)
        self.sym_values = sym_values
        self.real_sizes = real_sizes
        self.masks = {}     # node -> mask, or tuple of masks for multi-output nodes
        self._prefixes = {}
        self.host_checks = []  # (sympy condition over symbols, message): checked per call
        self.device_checks = []  # (0-dim bool tensor, message): true = raise, after the call

    # -- sizes -------------------------------------------------------------------
    def _prefix(self, sym, dim, rank, size, device):
        """The mask of a dim of padded size `size` whose real extent is `sym` (a
        symbol or an expression of them, e.g. s0 + 1 after a cat)."""
        key = (sym, size)
        m = self._prefixes.get(key)
        if m is None:  # one iota and compare per extent, reshaped where used
            m = torch.arange(size, device=device) < self.real_extent(sym)
            self._prefixes[key] = m
        shape = [1] * rank
        shape[dim] = size
        key = (sym, size, dim, rank)
        v = self._prefixes.get(key)
        if v is None:
            v = self._prefixes[key] = m.view(shape)
        return v

    def real_extent(self, e):
        """The real value of a size expression: a 0-dim int64 tensor computed from
        the real sizes (program inputs), or an int. Sums, products, min and max of
        symbols; anything else is Unsupported."""
        e = sympy.sympify(e)
        if e.is_Integer:
            return int(e)
        if isinstance(e, sympy.Symbol):
            if e not in self.real_sizes:
                raise Unsupported(f"a size {e} that no input gives")
            return self.real_sizes[e]
        parts = [self.real_extent(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return _fold(operator.add, parts)
        if isinstance(e, sympy.Mul):
            return _fold(operator.mul, parts)
        if isinstance(e, sympy.Min):
            return _fold(lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)), parts)
        if isinstance(e, sympy.Max):
            return _fold(lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)), parts)
        raise Unsupported(f"a size {e} whose real value is not a sum or product of sizes")

    def _extent_known(self, e):
        try:
            self.real_extent(e)
            return True
        except Unsupported:
            return False

    def _shape_mask(self, meta, value, mask):
        """ANDs the prefix mask of every dim whose size is exactly one symbol; checks
        that every other symbolic dim carries a propagated mask."""
        if not isinstance(meta, torch.Tensor) or not isinstance(value, torch.Tensor):
            return mask
        if meta.dim() != value.dim():
            raise Unsupported("rank of a padded value differs from the traced one")
        for d, size in enumerate(meta.shape):
            if not _is_symbolic(size):
                continue  # static: real everywhere (x[:, :k] of a padded dim: Dynamo guards k <= n)
            e = _expr(size)
            if mask is not None and mask.dim() == value.dim() and mask.shape[d] != 1:
                continue  # propagated: it already says which positions are real
            if (isinstance(e, sympy.Symbol) and e in self.real_sizes) or (
                    _is_sum(e) and self._extent_known(e)):
                # a padded size made from real data only (arange(n), a slice of a
                # buffer): the positions past the real size are padding all the same.
                # Not a product of symbols: a flattened input padded at its end would
                # not be in the row-major padded order its views assume.
                mask = _and(mask if mask is None else _full_rank(mask, value.dim()),
                            self._prefix(e, d, value.dim(), value.shape[d], value.device))
            else:
                raise Unsupported(f"dim {d} of size {e} has no known real extent")
        return mask

    # -- nodes -------------------------------------------------------------------
    def run_node(self, n):
        with self._set_current_node(n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            if n.op == "placeholder":
                out = self.placeholder(n.target, args, kwargs)
                m = self._shape_mask(n.meta.get("val"), out, None) if isinstance(out, torch.Tensor) else None
                self.masks[n] = m
                return out
            if n.op == "output":
                return self.output(n.target, args, kwargs)
            if n.op != "call_function":
                raise Unsupported(f"{n.op} node {n.target}")
            out, m = self._call(n, args, kwargs)
            meta = n.meta.get("val")
            if isinstance(out, torch.Tensor) and out.device.type != "tpu" and isinstance(meta, torch.Tensor) \
                    and any(_is_symbolic(d) for d in meta.shape):
                raise Unsupported(f"{n.target} makes a {out.device.type} tensor of symbolic size")
            if isinstance(out, torch.Tensor):
                m = self._shape_mask(meta, out, m)
                if m is not None:
                    m = _full_rank(m, out.dim())
            elif isinstance(out, (tuple, list)) and isinstance(meta, (tuple, list)):
                m = tuple(self._lift(self._shape_mask(me, o, mi), o) if isinstance(o, torch.Tensor)
                          else None for o, me, mi in zip(out, meta, m))
            self.masks[n] = m
            return out

    def _sizes_as_runtime_values(self, n, args):
        """A pointwise op given a size as a scalar (the backward of a mean over a
        padded dim divides by it) gets the real size instead: a 0-dim tensor computed
        from the runtime sizes, through the op's tensor overload. Sizes it cannot
        compute (1 / sqrt(s)) stay for _check_value_args to refuse."""
        new, changed = list(args), False
        for k, a in enumerate(n.args):
            if _symbolic_node(a) and isinstance(a.meta["val"], torch.SymInt) and \
                    not a.meta["val"].node.expr.free_symbols <= self.exact:
                try:
                    v = self.real_extent(_expr(a.meta["val"]))
                except Unsupported:
                    return None
                ref = next((x for x in args if isinstance(x, torch.Tensor)), None)
                if ref is None:
                    return None
                new[k] = torch.as_tensor(v, device=ref.device)
                changed = True
        return new if changed else None

    def compact_outputs(self, outs):
        """Outputs with a dim whose size is a product of symbols (a flattened view of
        padded dims: real positions scattered through it) get their real positions
        moved to the front, in order, so that slicing back to the real size gives
        the unpadded value: a stable sort of the positions by "is padding"."""
        out_node = next(n for n in self.module.graph.nodes if n.op == "output")
        nodes = out_node.args[0]
        res = list(outs)
        for k, (node, o) in enumerate(zip(nodes, outs)):
            meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
            if not isinstance(o, torch.Tensor) or not isinstance(meta, torch.Tensor):
                continue
            m = self._mask_of(node)
            for d, size in enumerate(meta.shape):
                e = _expr(size)
                if e.is_number or isinstance(e, sympy.Symbol) or _is_sum(e):
                    continue
                if m is None or m.shape[d] == 1:
                    raise Unsupported(f"an output of size {e} with no mask along it")
                along = m
                for dd in range(m.dim()):
                    if dd != d and along.shape[dd] != 1:
                        along = along.any(dd, keepdim=True)
                along = along.reshape(-1)
                perm = torch.sort(torch.logical_not(along).to(torch.int32), stable=True).indices
                res[k] = torch.index_select(res[k], d, perm)
        return type(outs)(res) if isinstance(outs, tuple) else res

    @staticmethod
    def _lift(m, value):
        return m if m is None else _full_rank(m, value.dim())

    def _mask_of(self, a):
        if isinstance(a, torch.fx.Node):
            return self.masks.get(a)
        return None

    def _call(self, n, args, kwargs):
        t = n.target
        in_masks = [self._mask_of(a) for a in n.args]
        if t in (operator.getitem,):
            src = self.masks.get(n.args[0])
            out = t(*args)
            return out, (src[n.args[1]] if isinstance(src, tuple) else None)
        if not isinstance(t, torch._ops.OpOverload):
            # SymInt arithmetic (operator.mul, sym_size, ...) runs on the bucket values.
            return t(*args, **kwargs), None
        if t in _SIZE_QUERIES:
            return t(*args, **kwargs), None  # the bucket's sizes, as the graph's arithmetic expects
        if torch.Tag.pointwise in t.tags:
            runtime = self._sizes_as_runtime_values(n, args)
            if runtime is not None:  # through the op's tensor overload
                return self._pointwise(n, runtime, kwargs, call=t.overloadpacket)
        _check_value_args(n, self.exact)
        listed = [self._mask_of(x) for a in n.args if isinstance(a, (list, tuple)) for x in a]
        if not any(m is not None for m in in_masks + listed) and not any(
                isinstance(self._mask_of(a), torch.Tensor) for a in n.kwargs.values()):
            return t(*args, **kwargs), None  # nothing padded flows in
        rule = _RULES.get(t)
        if rule is not None:
            return rule(self, n, args, kwargs, in_masks)
        if torch.Tag.pointwise in t.tags or t in _SAME_POSITION:
            return self._pointwise(n, args, kwargs)
        raise Unsupported(f"no padding rule for {t} on a padded input")

    def _pointwise(self, n, args, kwargs, call=None):
        out = (call or n.target)(*args, **kwargs)
        ref = out[0] if isinstance(out, (tuple, list)) else out
        m = None
        for a in list(n.args) + list(n.kwargs.values()):
            am = self._mask_of(a)
            if isinstance(am, torch.Tensor):
                m = _and(m, _full_rank(am, ref.dim()) if am.dim() < ref.dim() else am)
        if isinstance(out, (tuple, list)):
            return out, tuple(m if isinstance(o, torch.Tensor) and o.shape == ref.shape else None for o in out)
        return out, m


# -- rules: (interp, node, args, kwargs, masks of node.args) -> (value, mask) ----------

def _view_groups(a, b):
    """Groups of dims of shapes a and b (same element count) that a reshape maps onto
    each other: [(dims of a, dims of b)], size-1 leftovers joined to the last group."""
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        ii, jj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                pa *= a[i]
                ii.append(i)
                i += 1
            else:
                pb *= b[j]
                jj.append(j)
                j += 1
        groups.append((ii, jj))
    rest = (list(range(i, len(a))), list(range(j, len(b))))
    if groups:
        groups[-1] = (groups[-1][0] + rest[0], groups[-1][1] + rest[1])
    else:
        groups.append(rest)
    return groups


def _view_mask(m, a, b):
    """The mask of a reshape from shape a to b: dims of groups with no padding keep
    size 1, so a later reduction over them needs no masking."""
    if 0 in a:
        return m.expand(a).reshape(b)
    expanded, target = [1] * len(a), [1] * len(b)
    for ii, jj in _view_groups(a, b):
        if any(m.shape[d] != 1 for d in ii):
            for d in ii:
                expanded[d] = a[d]
            for d in jj:
                target[d] = b[d]
    return m.expand(expanded).reshape(target)


def _view_rule(it, n, args, kwargs, ms):
    x, m = args[0], ms[0]
    out = n.target(*args, **kwargs)
    if m is None:
        return out, None
    if n.target in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        return out, _view_mask(_full_rank(m, x.dim()), list(x.shape), list(out.shape))
    if n.target is aten.permute.default:
        return out, m.permute(args[1])
    if n.target is aten.t.default:
        return out, m.t()
    if n.target is aten.transpose.int:
        return out, m.transpose(args[1], args[2])
    if n.target is aten.unsqueeze.default:
        return out, m.unsqueeze(args[1])
    if n.target in (aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default):
        dims = _norm_dims(args[1] if len(args) > 1 else None, x.dim())
        keep = [d for d in dims if x.shape[d] == 1]
        r = m
        for d in sorted(keep, reverse=True):
            r = r.squeeze(d)
        return out, r
    if n.target is aten.expand.default:
        sizes = list(args[1])
        mm = _full_rank(m, len(sizes))
        return out, mm.expand([s if mm.shape[i] != 1 else 1 for i, s in enumerate(sizes)])
    raise Unsupported(f"view {n.target}")


def _dim_extent(it, n, dim):
    """The real extent of dim `dim` of node n's first input when its real positions
    are a prefix: one symbol, or a sum of them (a cat along padded dims); None
    otherwise (a flattened product of padded dims is not a prefix)."""
    meta = n.args[0].meta.get("val")
    e = _expr(meta.shape[dim])
    if isinstance(e, sympy.Symbol):
        return e if e in it.real_sizes else None
    if _is_sum(e) and e.free_symbols <= set(it.real_sizes):
        return e
    return None


def _size_ref(e):
    """How a check's message names a size: a symbol is filled in with its real
    value when the message is raised; an expression is shown as is."""
    return "{%s}" % e if isinstance(e, sympy.Symbol) else f"{e}"


def _select_rule(it, n, args, kwargs, ms):
    x, dim, index = args[0], args[1] % args[0].dim(), args[2]
    m = ms[0]
    if m is None or m.shape[dim] == 1:
        return n.target(*args, **kwargs), (None if m is None else m.squeeze(dim))
    sym = _dim_extent(it, n, dim)
    if sym is None or isinstance(index, torch.SymInt):
        raise Unsupported("select along a padded dim that is not one symbol")
    if index >= 0:
        it.host_checks.append((sympy.Gt(sym, index), f"index {index} is out of bounds for dimension "
                                                    f"{dim} of size {_size_ref(sym)}"))
        out = n.target(*args, **kwargs)
    else:  # counted from the real end: a runtime index
        it.host_checks.append((sympy.Ge(sym + index, 0), f"index {index} is out of bounds for "
                                                        f"dimension {dim} of size {_size_ref(sym)}"))
        i = (it.real_extent(sym) + index).view(1)
        out = torch.index_select(x, dim, i).squeeze(dim)
    return out, m.any(dim)  # the selected position is real


def _grows_with_sizes(e):
    """True when expression e (a slice bound) is at least as large at the bucket's
    sizes as at the real ones: a polynomial whose symbol terms are all positive."""
    e = sympy.sympify(e)
    if e.is_number:
        return True
    try:
        poly = sympy.Poly(e, *sorted(e.free_symbols, key=str))
    except sympy.PolynomialError:
        return False
    return all(c > 0 for monom, c in poly.terms() if any(monom))


def _slice_rule(it, n, args, kwargs, ms):
    """x[..., start:end] along a padded dim (whose real positions are a prefix):
    the same positions of the padded value hold the same values when start counts
    from the beginning (a static start >= 0); the result's real extent is its
    traced size (s - 1 for x[:, :-1], s for x[:, 0:s] of a cat of size s + 1)."""
    x, m = args[0], ms[0]
    dim = (args[1] if len(args) > 1 else 0) % x.dim()
    out = n.target(*args, **kwargs)
    if m is None or m.shape[dim] == 1:
        return out, m
    node_start = n.args[2] if len(n.args) > 2 else None
    node_end = n.args[3] if len(n.args) > 3 else None
    step = args[4] if len(args) > 4 else 1
    if isinstance(node_start, torch.fx.Node) or (node_start is not None and node_start < 0) or step != 1:
        raise Unsupported("slice of a padded dim from its end (or with a step)")
    if isinstance(node_end, torch.fx.Node) and not _grows_with_sizes(_expr(node_end.meta.get("val"))):
        raise Unsupported(f"slice of a padded dim up to {node_end.meta.get('val')}")
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else x.shape[dim]
    mask = torch.ops.aten.slice.Tensor(m, dim, start, end, step)
    if _dim_extent(it, n, dim) is None:
        raise Unsupported("slice along a padded dim whose real positions are not a prefix")
    size = n.meta["val"].shape[dim]
    if _is_symbolic(size):
        mask = _and(mask, it._prefix(_expr(size), dim, out.dim(), out.shape[dim], out.device))
    return out, mask


def _cat_rule(it, n, args, kwargs, ms):
    """cat along a padded dim: the real parts of the pieces, one after the other,
    then the padding. Where only the last piece is padded along the dim the plain
    cat is that layout; otherwise a gather with runtime offsets moves each piece's
    real part right after the previous one's. Along the other dims, a position is
    real where it is in the pieces."""
    tensors = list(args[0])
    nodes = list(n.args[0])
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    out = n.target(*args, **kwargs)
    dim %= out.dim()
    keep = [k for k, t in enumerate(tensors) if not (t.dim() == 1 and t.shape[0] == 0)]  # legacy empties
    metas = [nodes[k].meta.get("val") for k in keep]
    masks = [None if it._mask_of(nodes[k]) is None else _full_rank(it._mask_of(nodes[k]), out.dim())
             for k in keep]
    other = None  # the mask along the other dims
    for mk in masks:
        if mk is not None:
            other = _and(other, mk.any(dim, keepdim=True) if mk.shape[dim] != 1 else mk)
    padded = [k for k, me in enumerate(metas) if _is_symbolic(me.shape[dim])]
    if any(not (isinstance(_expr(metas[k].shape[dim]), sympy.Symbol) or _is_sum(_expr(metas[k].shape[dim])))
           for k in padded):
        raise Unsupported("cat along a padded dim whose real positions are not a prefix")
    size = n.meta["val"].shape[dim]
    if not padded:
        return out, other
    if padded != [len(keep) - 1]:
        # offsets of each piece in the padded value and in the real one
        idx = torch.arange(out.shape[dim], device=out.device)
        src = idx
        pad_off, real_off = 0, 0
        for k, (t, me) in enumerate(zip((tensors[i] for i in keep), metas)):
            if k:
                src = torch.where(idx >= real_off, idx - real_off + pad_off, src)
            pad_off += t.shape[dim]
            real_off = real_off + it.real_extent(_expr(me.shape[dim]))
        src = torch.clamp(src, max=out.shape[dim] - 1)
        out = torch.index_select(out, dim, src)
    return out, _and(other, it._prefix(_expr(size), dim, out.dim(), out.shape[dim], out.device))


def _split_rule(it, n, args, kwargs, ms):
    """split/unbind along a dim that is not padded: each piece keeps the mask."""
    x, m = args[0], ms[0]
    if n.target is aten.unbind.int:
        dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % x.dim()
    else:
        dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % x.dim()
    mm = None if m is None else _full_rank(m, x.dim())
    if mm is not None and mm.shape[dim] != 1:
        raise Unsupported(f"{n.target} along a padded dim")
    out = n.target(*args, **kwargs)
    piece = mm if n.target is not aten.unbind.int or mm is None else mm.squeeze(dim)
    return out, tuple(piece for _ in out)


def _sum_rule(it, n, args, kwargs, ms):
    x, m = args[0], ms[0]
    if m is not None:
        m = _full_rank(m, x.dim())
    identity = _SUM_LIKE[n.target]
    dims_arg = args[1] if len(args) > 1 and n.target not in (aten.sum.default, aten.prod.default,
                                                               aten.any.default, aten.all.default) else None
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dims = _norm_dims(dims_arg, x.dim())
    xf = _fill(x, m, identity)
    out = n.target(xf, *args[1:], **kwargs)
    return out, _reduce_mask(m, dims, keepdim)


def _mean_rule(it, n, args, kwargs, ms):
    x, m = args[0], _full_rank(ms[0], args[0].dim())
    dims_arg = args[1] if n.target is aten.mean.dim and len(args) > 1 else None
    dims = _norm_dims(dims_arg, x.dim())
    keepdim = args[2] if n.target is aten.mean.dim and len(args) > 2 else kwargs.get("keepdim", False)
    dtype = kwargs.get("dtype") or x.dtype
    total = torch.sum(_fill(x, m, 0).to(dtype), dims, keepdim=keepdim)
    count = torch.sum(m.expand(x.shape).to(dtype), dims, keepdim=keepdim)
    return total / count, _reduce_mask(m, dims, keepdim)


def _var_rule(it, n, args, kwargs, ms):
    # var/std.correction(x, dim, correction=, keepdim=)
    x, m = args[0], _full_rank(ms[0], args[0].dim())
    dims = _norm_dims(args[1] if len(args) > 1 else kwargs.get("dim"), x.dim())
    correction = kwargs.get("correction", 1)
    correction = 1 if correction is None else correction
    keepdim = kwargs.get("keepdim", False)
    mf = m.expand(x.shape).to(x.dtype)
    count = torch.sum(mf, dims, keepdim=True)
    mean = torch.sum(_fill(x, m, 0), dims, keepdim=True) / count
    dev = _fill(x - mean, m, 0)
    var = torch.sum(dev * dev, dims, keepdim=True) / torch.clamp(count - correction, min=0)
    if n.target is aten.std.correction:
        var = torch.sqrt(var)
    if not keepdim:
        for d in reversed(dims):
            var = var.squeeze(d)
    return var, _reduce_mask(m, dims, keepdim)


def _extreme_rule(table):
    def rule(it, n, args, kwargs, ms):
        x, m = args[0], ms[0]
        m = None if m is None else _full_rank(m, x.dim())
        xf = _fill(x, m, table[n.target](x.dtype))
        out = n.target(xf, *args[1:], **kwargs)
        if n.target in _MAX_DIM:
            dim = args[1] % x.dim()
            keepdim = args[2] if len(args) > 2 else False
            r = _reduce_mask(m, [dim], keepdim)
            return out, (r, r)
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if n.target in _ARG_LIKE and dims is None:
            dims = list(range(x.dim()))
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        return out, _reduce_mask(m, _norm_dims(dims, x.dim()), keepdim)
    return rule


def _softmax_rule(it, n, args, kwargs, ms):
    x, m = args[0], ms[0]
    dim = args[1] % x.dim()
    if m is not None and _full_rank(m, x.dim()).shape[dim] != 1:
        x = _fill(x, _full_rank(m, x.dim()), -float("inf"))
    return n.target(x, *args[1:], **kwargs), m


def _layer_norm_rule(it, n, args, kwargs, ms):
    x, shape = args[0], args[1]
    m = ms[0]
    k = len(shape)
    if any(d >= x.dim() - k for d in _padded_dims(_full_rank(m, x.dim()) if m is not None else None)):
        raise Unsupported("layer norm over a padded dim")
    if any(mm is not None for mm in ms[2:4]):
        raise Unsupported("padded layer norm weights")
    out = n.target(*args, **kwargs)
    stat = None if m is None else _full_rank(m, x.dim())  # mean/rstd keep x's rank
    return out, (m, stat, stat)


def _contract(a, ma, adim, b, mb, bdim):
    """Zeroes both operands of a contraction over a padded dim (NaN * 0 is NaN, so
    zeroing one side is not enough)."""
    pa = ma is not None and ma.shape[adim] != 1
    pb = mb is not None and mb.shape[bdim] != 1
    if pa or pb:
        a, b = _fill(a, ma, 0), _fill(b, mb, 0)
    return a, b


def _mm_rule(it, n, args, kwargs, ms):
    t = n.target
    if t is aten.addmm.default or t is aten.baddbmm.default:
        bias, a, b = args[:3]
        mbias, ma, mb = ms[:3]
        rest = args[3:]
    else:
        bias, mbias = None, None
        a, b = args[:2]
        ma, mb = ms[:2]
        rest = args[2:]
    ma = None if ma is None else _full_rank(ma, a.dim())
    mb = None if mb is None else _full_rank(mb, b.dim())
    a2, b2 = _contract(a, ma, a.dim() - 1, b, mb, b.dim() - 2)
    out = t(bias, a2, b2, *rest, **kwargs) if bias is not None else t(a2, b2, *rest, **kwargs)
    # result mask: rows from a, columns from b (and batch from both), bias broadcast
    rows = None if ma is None else (ma.any(-1, keepdim=True) if ma.shape[-1] != 1 else ma)
    cols = None if mb is None else (mb.any(-2, keepdim=True) if mb.shape[-2] != 1 else mb)
    m = _and(rows, cols)
    if mbias is not None:
        m = _and(m, _full_rank(mbias, out.dim()))
    return out, (None if m is None else _full_rank(m, out.dim()))


def _embedding_rule(it, n, args, kwargs, ms):
    weight, idx = args[:2]
    mw = None if ms[0] is None else _full_rank(ms[0], 2)
    m = ms[1]
    idx = _checked_index(it, n, idx, m, mw, 0)  # pad ids read row 0
    out = n.target(weight, idx, *args[2:], **kwargs)
    m = None if m is None else _full_rank(m, idx.dim()).unsqueeze(-1)
    if mw is not None:
        m = _and(m, _full_rank(mw.any(0, keepdim=True), out.dim()))
    return out, m


def _cumulative_rule(it, n, args, kwargs, ms):
    x, m = args[0], ms[0]
    dim = args[1] % x.dim()
    if m is not None and _full_rank(m, x.dim()).shape[dim] != 1 and _dim_extent(it, n, dim) is None:
        raise Unsupported("cumulative op along a padded dim that is not one symbol")
    # real positions only see earlier positions, which are real along a prefix dim
    out = n.target(*args, **kwargs)
    if isinstance(out, (tuple, list)):
        return out, (m, m)
    return out, m


def _sort_rule(it, n, args, kwargs, ms):
    # sort.default(x, dim=-1, descending=False); sort.stable(x, *, stable, dim, descending)
    x, m = args[0], ms[0]
    if n.target is aten.sort.stable:
        dim, descending = kwargs.get("dim", -1), kwargs.get("descending", False)
    else:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        descending = args[2] if len(args) > 2 else kwargs.get("descending", False)
    dim %= x.dim()
    mm = _full_rank(m, x.dim())
    if mm.shape[dim] == 1:
        return n.target(*args, **kwargs), (m, m)
    if _dim_extent(it, n, dim) is None:
        raise Unsupported("sort along a padded dim that is not one symbol")
    # Stable sort by value, then a stable sort by "is padding" moves padding last
    # without reordering real values (ties, NaN and infinities included).
    values, idx = torch.sort(x, stable=True, dim=dim, descending=descending)
    pad = torch.logical_not(mm.expand(x.shape)).to(torch.int32).gather(dim, idx)
    _, perm = torch.sort(pad, stable=True, dim=dim)
    return (values.gather(dim, perm), idx.gather(dim, perm)), (m, m)


def _topk_rule(it, n, args, kwargs, ms):
    x, k, m = args[0], args[1], ms[0]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", -1)) % x.dim()
    largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
    mm = _full_rank(m, x.dim())
    if mm.shape[dim] == 1:
        return n.target(*args, **kwargs), (m, m)
    sym = _dim_extent(it, n, dim)
    if sym is None or isinstance(k, torch.SymInt):
        raise Unsupported("topk along a padded dim that is not one symbol")
    it.host_checks.append((sympy.Ge(sym, k), f"selected index k={k} out of range for dimension "
                                            f"{dim} of size {_size_ref(sym)}"))
    xf = _fill(x, mm, _low(x.dtype) if largest else _high(x.dtype))
    out = n.target(xf, *args[1:], **kwargs)
    r = mm.narrow(dim, 0, 1)  # the k results of a real row are real
    return out, (r, r)


def _gather_rule(it, n, args, kwargs, ms):
    x, dim, idx = args[0], args[1] % args[0].dim(), args[2]
    mx, mi = ms[0], ms[2]
    mx = None if mx is None else _full_rank(mx, x.dim())
    if mx is not None and mx.shape[dim] != 1 and _dim_extent(it, n, dim) is None:
        raise Unsupported("gather along a padded dim that is not one symbol")
    idx = _checked_index(it, n, idx, mi, mx, dim)
    out = n.target(x, args[1], idx, *args[3:], **kwargs)
    m = mi
    if mx is not None:
        m = _and(m, mx.any(dim, keepdim=True) if mx.shape[dim] != 1 else mx)
    return out, m


def _index_select_rule(it, n, args, kwargs, ms):
    x, dim, idx = args[0], args[1] % args[0].dim(), args[2]
    mx, mi = ms[0], ms[2]
    if mx is not None and _full_rank(mx, x.dim()).shape[dim] != 1:
        raise Unsupported("index_select along a padded dim")
    idx = _fill(idx, mi, 0)
    out = n.target(x, args[1], idx)
    m = None if mx is None else _full_rank(mx, x.dim())
    if mi is not None:
        shape = [1] * x.dim()
        shape[dim] = mi.shape[0]
        m = _and(m, mi.view(shape))
    return out, m


def _checked_index(it, n, idx, mi, src_mask, dim):
    """An index tensor into dim `dim` of node n's first input, made safe to use on
    the padded value: pad positions read row 0, negative indices count from the
    real end, and indices a real run would reject (beyond the real extent, inside
    the padding) raise a flag checked after the call (device_checks)."""
    idx = _fill(idx, mi, 0)
    if src_mask is None or src_mask.shape[dim] == 1:
        return idx
    sym = _dim_extent(it, n, dim)
    if sym is None:
        raise Unsupported("indexing into a padded dim that is not one symbol")
    real = it.real_extent(sym)
    idx = torch.where(idx < 0, idx + real, idx)
    bad = torch.logical_or(idx < 0, idx >= real)
    if mi is not None:
        bad = torch.logical_and(bad, mi)
    it.device_checks.append((bad.any(), f"index out of range in dimension {dim} of a tensor of "
                                        f"dynamic size {_size_ref(sym)}"))
    return torch.where(bad, torch.zeros_like(idx), idx)


def _index_rule(it, n, args, kwargs, ms):
    # x[i0, i1, ...]: index tensors for the leading dims (no None) -> broadcast shape + rest
    x, indices = args[0], list(args[1])
    mx = None if ms[0] is None else _full_rank(ms[0], x.dim())
    if any(i is None for i in indices) or any(i.dtype == torch.bool for i in indices):
        raise Unsupported("index with None or boolean indices on a padded value")
    k = len(indices)
    idx_masks = [it._mask_of(a) for a in n.args[1]]
    safe = [_checked_index(it, n, i, mi, mx, d) for d, (i, mi) in enumerate(zip(indices, idx_masks))]
    out = n.target(x, safe)
    b_rank = out.dim() - (x.dim() - k)
    m = None
    for mi in idx_masks:
        if mi is not None:
            m = _and(m, _full_rank(mi, b_rank))
    if m is not None:
        m = m.reshape(list(m.shape) + [1] * (x.dim() - k))
    if mx is not None:
        rest = mx
        for d in range(k):
            if rest.shape[d] != 1:
                rest = rest.any(d, keepdim=True)
        rest = rest.reshape([1] * b_rank + list(rest.shape[k:]))
        m = _and(m, rest)
    return out, m


def _sdpa_rule(it, n, args, kwargs, ms):
    # (q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, ...): keys padded along
    # dim -2 of k/v are masked out of the softmax through attn_mask.
    q, k, v = args[:3]
    mq, mk, mv = [None if mm is None else _full_rank(mm, t.dim()) for mm, t in zip(ms[:3], (q, k, v))]
    key_mask = None
    if mk is not None and mk.shape[-2] != 1:
        key_mask = mk.narrow(-1, 0, 1).transpose(-1, -2)  # [..., 1, S_k]
    if mv is not None and mv.shape[-2] != 1:
        key_mask = _and(key_mask, mv.narrow(-1, 0, 1).transpose(-1, -2))
    rest = list(args[3:])
    kw = dict(kwargs)
    if key_mask is not None:
        attn_mask = rest[0] if rest else kw.pop("attn_mask", None)
        if attn_mask is None:
            attn_mask = key_mask
        elif attn_mask.dtype == torch.bool:
            attn_mask = torch.logical_and(attn_mask, key_mask)
        else:
            attn_mask = torch.where(key_mask, attn_mask,
                                    torch.full((), -float("inf"), dtype=attn_mask.dtype, device=q.device))
        k, v = _fill(k, mk, 0), _fill(v, mv, 0)
        if rest:
            rest[0] = attn_mask
        else:
            kw["attn_mask"] = attn_mask
    if len(ms) > 3 and ms[3] is not None and key_mask is None:
        pass  # a padded mask alone only pads positions that are padded anyway
    out = n.target(q, k, v, *rest, **kw)
    m = None if mq is None else mq.narrow(-1, 0, 1) if mq.shape[-1] != 1 else mq
    if isinstance(out, (tuple, list)):
        return out, tuple(m if i == 0 else None for i in range(len(out)))
    return out, m


# -- backward ops (training graphs): the padding must add nothing to what they sum -----

def _softmax_backward_rule(it, n, args, kwargs, ms):
    # (grad, output, dim, input_dtype): zeros in both at pad positions keep
    # sum(grad * output) over the dim (and the log version's sum(grad)) real
    g, y, dim = args[0], args[1], args[2] % args[0].dim()
    m = _and(None if ms[0] is None else _full_rank(ms[0], g.dim()),
             None if ms[1] is None else _full_rank(ms[1], g.dim()))
    if m is not None and m.shape[dim] != 1:
        g = _fill(g, m, 0)
        if n.target is aten._softmax_backward_data.default:
            y = _fill(y, m, 0)
    return n.target(g, y, *args[2:], **kwargs), m


def _layer_norm_backward_rule(it, n, args, kwargs, ms):
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask): the
    # weight and bias gradients sum over the rows, padded ones included
    g, x, shape, mean, rstd = args[:5]
    k = len(shape)
    m = _and(None if ms[0] is None else _full_rank(ms[0], g.dim()),
             None if ms[1] is None else _full_rank(ms[1], x.dim()))
    if any(d >= x.dim() - k for d in _padded_dims(m)):
        raise Unsupported("layer norm backward over a padded dim")
    if any(mm is not None for mm in ms[5:7]):
        raise Unsupported("padded layer norm weights")
    rows = None if m is None else m  # size 1 along the normalized dims
    g, x = _fill(g, rows, 0), _fill(x, rows, 0)
    mean, rstd = _fill(mean, rows, 0), _fill(rstd, rows, 0)
    out = n.target(g, x, shape, mean, rstd, *args[5:], **kwargs)
    return out, (rows, None, None)


def _embedding_backward_rule(it, n, args, kwargs, ms):
    # (grad, indices, num_weights, padding_idx, scale_grad_by_freq): pad positions
    # add a zero gradient to row 0
    g, idx = args[0], args[1]
    scale = args[4] if len(args) > 4 else kwargs.get("scale_grad_by_freq", False)
    mi = None if ms[1] is None else _full_rank(ms[1], idx.dim())
    mg = None if ms[0] is None else _full_rank(ms[0], g.dim())
    rows = _and(mi, None if mg is None else _reduce_mask(mg, [g.dim() - 1], False))
    if rows is not None and scale:
        raise Unsupported("embedding backward with scale_grad_by_freq on padded indices")
    if rows is not None:
        idx = _fill(idx, rows, 0)
        g = _fill(g, rows.unsqueeze(-1), 0)
    return n.target(g, idx, *args[2:], **kwargs), None


_RULES = {}
for _op in (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
            aten.t.default, aten.transpose.int, aten.unsqueeze.default, aten.squeeze.dim,
            aten.squeeze.dims, aten.squeeze.default, aten.expand.default):
    _RULES[_op] = _view_rule
_RULES[aten.select.int] = _select_rule
_RULES[aten.slice.Tensor] = _slice_rule
_RULES[aten.cat.default] = _cat_rule
_RULES[aten._softmax_backward_data.default] = _softmax_backward_rule
_RULES[aten._log_softmax_backward_data.default] = _softmax_backward_rule
_RULES[aten.native_layer_norm_backward.default] = _layer_norm_backward_rule
_RULES[aten.embedding_dense_backward.default] = _embedding_backward_rule
for _op in (aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int):
    _RULES[_op] = _split_rule
for _op in _SUM_LIKE:
    _RULES[_op] = _sum_rule
_RULES[aten.mean.dim] = _mean_rule
_RULES[aten.mean.default] = _mean_rule
_RULES[aten.var.correction] = _var_rule
_RULES[aten.std.correction] = _var_rule
for _table in (_MAX_LIKE, _ARG_LIKE, _MAX_DIM):
    for _op in _table:
        _RULES[_op] = _extreme_rule(_table)
for _op in _SOFTMAX:
    _RULES[_op] = _softmax_rule
_RULES[aten.native_layer_norm.default] = _layer_norm_rule
# matmul: Defer & Fuse records the batched forms as one op where no gradient is
# recorded ([..., n, k] by [..., k, m] or by [k, m]; csrc/aten/no_grad_composites.cc).
for _op in (aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
            aten.matmul.default):
    _RULES[_op] = _mm_rule
_RULES[aten.embedding.default] = _embedding_rule
for _op in _CUMULATIVE:
    _RULES[_op] = _cumulative_rule
_RULES[aten.sort.default] = _sort_rule
_RULES[aten.sort.stable] = _sort_rule
_RULES[aten.topk.default] = _topk_rule
_RULES[aten.gather.default] = _gather_rule
_RULES[aten.index_select.default] = _index_select_rule
_RULES[aten.index.Tensor] = _index_rule
for _name in ("_scaled_dot_product_attention_math", "scaled_dot_product_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_fused_attention_overrideable"):
    _op = getattr(aten, _name, None)
    if _op is not None:
        _RULES[_op.default] = _sdpa_rule

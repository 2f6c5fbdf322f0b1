"""Runs one AOTAutograd graph (forward, backward or inference) as one fused
StableHLO program.

The graph builder is the Defer & Fuse recorder of the C++ core: with this
thread in Defer & Fuse, calling each ATen op of the graph records a node whose
lowering comes from the one registry (csrc/lower), and the final flush emits
them all into one module, compiles it once and caches it by graph structure in
the same fused-program cache the eager modes use. So the compiled mode, Strict
Eager and Defer & Fuse share every lowering and every cached program.

Replay is the GraphModule's own generated Python: a straight-line sequence of
`torch.ops.aten.*` calls that drops each intermediate after its last use, so
only the graph's outputs are alive at the flush and everything else fuses away.
Ops without a lowering run on the CPU through the normal fallback, which
flushes the recorded prefix first: correct, but such a graph runs as more than
one program (debug.report() names the op).
"""
import os

from .. import _C
from . import graph_stats

_DEFER_AND_FUSE = 1
# Large enough that a compiled graph is never cut by the eager size bound.
_UNBOUNDED = 1 << 40


class CompiledGraph:
    """Called with the list of the graph's inputs (AOTAutograd's boxed calling
    convention); it empties the list before the program runs so that saved
    activations are released as soon as the program no longer needs them."""

    def __init__(self, gm, kind):
        self._fn = gm.forward
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        ops = sorted({str(n.target) for n in nodes})
        self.record = graph_stats.new_record(kind, len(nodes), ops, gm.code)
        self._dumped_fx = False

    def __call__(self, args):
        # The override is set here, not by the caller: the backward graph runs on
        # autograd's device thread, which does not see the caller's override.
        prev_mode = _C._thread_mode()
        _C._set_thread_mode(_DEFER_AND_FUSE)
        try:
            if _C._pending_nodes():
                # Work recorded before the call runs on its own, so the compiled
                # graph is exactly one program whose key is the graph alone.
                _C._flush("before compiled graph")
            limit = _C._max_graph_nodes()
            _C._set_max_graph_nodes(_UNBOUNDED)
            try:
                outs = self._fn(*args)
                args.clear()
            finally:
                _C._set_max_graph_nodes(limit)
            self._flush()
        except BaseException:
            if _C._pending_nodes():
                _C._flush("compiled graph error")
            raise
        finally:
            _C._set_thread_mode(prev_mode)
        return outs

    def _flush(self):
        rec = self.record
        rec.calls += 1
        dump = _C._dump_dir()
        before_files = graph_stats.list_programs(dump) if dump else None
        d0, m0 = _C._deferred_stats(), _C._metrics()
        _C._flush("compiled graph")
        d1 = _C._deferred_stats()
        rec.cache_hits += d1["fused_cache_hits"] - d0["fused_cache_hits"]
        misses = d1["fused_cache_misses"] - d0["fused_cache_misses"]
        if misses:
            rec.compiles += misses
            m1 = _C._metrics()
            # XLA compile time, or loading the executable from the disk cache.
            rec.compile_seconds += sum(m1.get(k, 0.0) - m0.get(k, 0.0)
                                       for k in ("compile_seconds", "disk_load_seconds"))
        if dump:
            self._note_dump(dump, before_files)

    def _note_dump(self, dump, before_files):
        new = sorted(graph_stats.list_programs(dump) - before_files)
        self.record.programs += [os.path.join(dump, f) for f in new]
        if not self._dumped_fx:
            self._dumped_fx = True
            path = os.path.join(dump, f"compiled_graph_{self.record.id}_{self.record.kind}.py")
            with open(path, "w") as f:
                f.write(f"# FX graph {self.record.id} ({self.record.kind}), "
                        f"{self.record.nodes} nodes; StableHLO: "
                        f"{', '.join(self.record.programs) or 'compiled earlier'}\n")
                f.write(self.record.fx_code)

"""Runs one AOTAutograd graph (forward, backward or inference) as one fused
StableHLO program, called directly after its first call.

First call: the graph is recorded by the Defer & Fuse recorder of the C++ core.
With this thread in Defer & Fuse, the GraphModule's generated Python calls each
ATen op, recording a node whose lowering comes from the one registry
(csrc/lower); the flush emits them all into one module, compiled once and cached
by graph structure in the same fused-program cache the eager modes use. The
code drops each intermediate after its last use, so only the graph's outputs
are alive at the flush and everything else fuses away.

The flush is then kept as a CompiledTrace (csrc/aten/compiled_trace.h): the
executable plus how its parameters and outputs bind to the graph's inputs and
results (input mutations, results aliasing inputs, RNG states, constants).
Later calls bind the input tensors' buffers and launch it, with no ATen op
dispatched or recorded; Dynamo's guards still decide when the graph applies,
and a trace also declines inputs whose storage layout differs (then a new one
is captured for that layout).

A graph with CPU scalar work (AdamW's CPU step counts) is split first
(cpu_prologue.py): the CPU part runs eagerly each call and hands its scalars to
the device part, which is called directly.

Graphs that cannot be one program keep the recording path on every call: an op
without a lowering (it runs on the CPU and cuts the graph), a data-dependent op,
a `_c10d_functional` collective (host-staged transports flush), non-tensor
inputs (symbolic sizes), CPU tensors inside the graph; debug.compiled_graphs()
gives each graph's why_recorded.
"""
import os

import torch

from .. import _C
from . import cpu_prologue, graph_stats

_DEFER_AND_FUSE = 1
_MAX_TRACES = 8  # input layouts kept per graph (Dynamo recompiles on shape changes)


def _why_not_direct(gm):
    """Why the graph must be recorded on every call, judged from the FX graph
    (None when it may become one directly called program)."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        ns = getattr(n.target, "namespace", None)
        if ns == "_c10d_functional":
            return f"collective {n.target} (host-staged transports run it on its own)"
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type == "cpu":
            return f"{n.target} computes a CPU tensor inside the graph"
    return None


class _Direct:
    """How to rebuild the graph's return value around a CompiledTrace's results."""

    def __init__(self, outs):
        self.seq = type(outs)
        self.consts = [(i, o) for i, o in enumerate(outs) if not isinstance(o, torch.Tensor)]
        self.plain = self.seq is list and not self.consts

    def finish(self, res):
        for i, o in self.consts:
            res[i] = o
        return res if self.seq is list else self.seq(res)


class CompiledGraph:
    """Called with the list of the graph's inputs (AOTAutograd's boxed calling
    convention); it empties the list before returning so that saved activations
    are released as soon as the program no longer needs them."""

    def __init__(self, gm, kind, record=None):
        # record: shared by the programs of one graph that runs in several (buckets)
        self._split = cpu_prologue.split(gm)
        device_gm = self._split.device_gm if self._split else gm
        self._fn = device_gm.forward
        nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
        ops = sorted({str(n.target) for n in nodes})
        self.record = record or graph_stats.new_record(kind, len(nodes), ops, gm.code)
        self._traces = _C._CompiledTraceSet()  # called in one C++ step
        self._direct = []  # per trace (same order): how to finish its results
        self._why_not = _why_not_direct(device_gm)
        self._dumped_fx = False

    def __call__(self, args):
        if self._split is not None:
            args[:] = self._split.device_args(args)  # the CPU part runs here
        if self._direct:
            hit = self._traces(args)  # empties args when a trace ran
            if hit is not None:
                i, res = hit
                d = self._direct[i]
                return res if d.plain else d.finish(res)
        return self._record(args)

    def _record(self, args):
        rec = self.record
        inputs = None
        if self._why_not is None and len(self._traces) < _MAX_TRACES:
            if all(isinstance(a, torch.Tensor) and a.device.type == "tpu" for a in args):
                inputs = list(args)
            else:
                self._why_not = "inputs that are not tpu tensors (symbolic sizes, CPU scalars)"
        dump = _C._dump_dir()
        before_files = graph_stats.list_programs(dump) if dump else None
        # The override is set here, not by the caller: the backward graph runs on
        # autograd's device thread, which does not see the caller's override.
        prev_mode = _C._thread_mode()
        _C._set_thread_mode(_DEFER_AND_FUSE)
        try:
            # Work recorded before the call runs on its own, so the compiled graph
            # is exactly one program whose key is the graph alone.
            runs = _C._begin_capture()
            try:
                outs = self._fn(*args)
                args.clear()
            except BaseException:
                _C._end_capture()  # what was recorded still runs
                raise
            if inputs is not None:
                results = [o if isinstance(o, torch.Tensor) else None for o in outs]
                trace, info, why = _C._capture(inputs, results, runs)
                if trace is not None:
                    self._traces.add(trace)
                    self._direct.append(_Direct(outs))
                    rec.traces.append(trace)
                else:
                    self._why_not = why
            else:
                info = _C._end_capture()
        finally:
            _C._set_thread_mode(prev_mode)
        rec.recorded_calls += 1
        rec.why_recorded = self._why_not
        if info["compiled"]:
            rec.compiles += 1
            rec.compile_seconds += info["compile_seconds"]
        elif info["ran"]:
            rec.recorded_hits += 1
        if dump:
            self._note_dump(dump, before_files)
        return outs

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

"""Per compiled graph records for torch_tpu.debug.compiled_graphs()."""
import itertools
import os
import threading

_lock = threading.Lock()
_graphs = []
_ids = itertools.count()


class GraphRecord:
    """What one FX graph handed to the backend did: its size, how often it ran,
    how many fused programs it compiled (one per input layout) and how long that
    took, how often the program cache already held its program, and where its
    StableHLO was dumped (with TORCH_TPU_DUMP_DIR / debug.set_dump_dir).

    Counts come from the graph's own runs: the calls that recorded it (each one
    flush, which compiled or hit the fused cache) and its CompiledTraces (each
    call a launch of the program they hold), never from process-wide counters."""

    def __init__(self, kind, nodes, ops, fx_code):
        self.id = next(_ids)
        self.kind = kind          # "forward" | "backward" | "inference"
        self.nodes = nodes        # FX call_function nodes
        self.ops = ops            # distinct ATen overloads used
        self.fx_code = fx_code
        self.recorded_calls = 0   # calls that ran the graph's Python (recording it)
        self.recorded_hits = 0    # ... whose flush found its program in the cache
        self.compiles = 0
        self.compile_seconds = 0.0
        self.traces = []          # CompiledTraces: the program called directly
        self.why_recorded = None  # why calls keep recording (None: they call a trace)
        self.programs = []        # dumped StableHLO files (.mlir), newest last

    @property
    def direct_calls(self):
        return sum(t.calls for t in self.traces)

    @property
    def calls(self):
        return self.recorded_calls + self.direct_calls

    @property
    def cache_hits(self):
        return self.recorded_hits + self.direct_calls

    def as_dict(self):
        return dict(id=self.id, kind=self.kind, nodes=self.nodes, ops=self.ops,
                    calls=self.calls, compiles=self.compiles,
                    compile_seconds=self.compile_seconds, cache_hits=self.cache_hits,
                    direct_calls=self.direct_calls, why_recorded=self.why_recorded,
                    stablehlo_files=list(self.programs))

    def stablehlo(self):
        """The StableHLO text of the newest program dumped for this graph, or None
        when no dump directory was set when it compiled."""
        if not self.programs:
            return None
        with open(self.programs[-1]) as f:
            return f.read()


def new_record(kind, nodes, ops, fx_code):
    rec = GraphRecord(kind, nodes, ops, fx_code)
    with _lock:
        _graphs.append(rec)
    return rec


def records():
    with _lock:
        return list(_graphs)


def clear():
    with _lock:
        _graphs.clear()


def list_programs(dump_dir):
    """The .mlir files in `dump_dir` (empty when it does not exist yet)."""
    try:
        return {f for f in os.listdir(dump_dir) if f.endswith(".mlir")}
    except OSError:
        return set()

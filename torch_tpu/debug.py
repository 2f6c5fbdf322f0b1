"""Counters and reports: what ran, what compiled, what fell back to the CPU; program
dumps; the numerics check (see torch_tpu.numerics)."""
import contextlib
import os

from . import _C
from .numerics import NumericsMismatch, check_numerics  # noqa: F401  (public here)


def metrics():
    """A dict: ops_executed, programs_compiled, compile_seconds, cache_hits,
    cache_misses (in-memory program cache), executions, bytes_to_device,
    bytes_to_host, cpu_fallback_ops, cpu_fallback_counts (op name -> calls),
    cpu_fallback_sites (op name -> "file:line in function" of its first call),
    disk_* (the persistent compile cache, see torch_tpu.cache.stats()) and, once the
    execution modes report them, ops_by_mode and materializations (reason -> count)."""
    m = _C._metrics()
    d = _C._deferred_stats()
    m["ops_by_mode"] = {"strict_eager": m["ops_executed"] - d["ops_recorded"],
                        "defer_and_fuse": d["ops_recorded"]}
    m["materializations"] = dict(d["materializations"])
    m["fused_graphs_run"] = d["graphs_run"]
    m["fused_graph_nodes"] = d["graph_nodes_total"]
    m["largest_fused_graph"] = d["largest_graph"]
    m["fused_cache_hits"] = d["fused_cache_hits"]
    m["fused_cache_misses"] = d["fused_cache_misses"]
    m["fused_graphs_run_by_node"] = d["graphs_run_by_node"]
    m["fused_graph_nodes_run_by_node"] = d["nodes_run_by_node"]
    return m


def reset_metrics():
    _C._reset_metrics()
    _C._reset_deferred_stats()


def dynamic_shapes():
    """torch.compile graphs with symbolic sizes: how many run padded to buckets and
    how many per size (and why), programs made for buckets, calls of each kind
    (see torch_tpu/dynamo/bucketed_graph.py)."""
    from .dynamo import bucketed_graph
    return bucketed_graph.stats()


def _size(n):
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024


def report():
    """A human-readable summary of metrics(): ops by mode, compiles and their time,
    cache hits, CPU-fallback ops with the line that first hit each, materialisations
    and their reasons, host <-> device bytes."""
    m = metrics()
    lines = ["torch_tpu report", f"  ops executed        {m['ops_executed']}"]
    for mode, n in sorted(m.get("ops_by_mode", {}).items()):
        lines.append(f"    {mode}: {n}")
    lines += [
        f"  programs compiled   {m['programs_compiled']} ({m['compile_seconds']:.3f} s)",
        f"  program cache       memory: {m['cache_hits']} hits, {m['cache_misses']} misses",
    ]
    if "disk_hits" in m:
        info = _C._cache_info()
        if info["enabled"]:
            lines.append(
                f"                      disk: {m['disk_hits']} hits "
                f"({m['disk_load_seconds']:.3f} s to load), {m['disk_misses']} misses, "
                f"{m['disk_writes']} written ({_size(m['disk_bytes_written'])}) in {info['dir']}")
            if m["disk_bad_entries"] or m["disk_write_failures"]:
                lines.append(f"                      {m['disk_bad_entries']} bad entries replaced, "
                             f"{m['disk_write_failures']} failed writes")
        else:
            lines.append("                      disk: off")
    lines += [
        f"  executions          {m['executions']}",
        f"  host -> device      {_size(m['bytes_to_device'])}",
        f"  device -> host      {_size(m['bytes_to_host'])}",
    ]
    if m["fused_graphs_run"]:
        lines.append(f"  fused graphs        {m['fused_graphs_run']} run, "
                     f"{m['fused_graph_nodes']} ops in all, largest {m['largest_fused_graph']}; "
                     f"fused-program cache {m['fused_cache_hits']} hits, "
                     f"{m['fused_cache_misses']} misses")
    mats = m.get("materializations", {})
    if mats:
        lines.append(f"  materialisations    {sum(mats.values())}")
        for reason, n in sorted(mats.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {reason}: {n}")
    lines.append(f"  host-tier ops       {m['host_tier_ops']}")
    if m["fused_graphs_run_by_node"]:
        lines.append(f"  run node by node    {m['fused_graphs_run_by_node']} graphs whose shapes keep "
                     f"changing ({m['fused_graph_nodes_run_by_node']} ops), not compiled")
    lines.append(f"  CPU-fallback ops    {m['cpu_fallback_ops']}")
    sites = m.get("cpu_fallback_sites", {})
    for name, n in sorted(m["cpu_fallback_counts"].items(), key=lambda kv: -kv[1]):
        where = f"  (first at {sites[name]})" if sites.get(name) else ""
        lines.append(f"    {name}: {n}{where}")
    return "\n".join(lines)


def set_dump_dir(path):
    """Writes every program compiled (or loaded from the compile cache) from now on as
    <key>.mlir (StableHLO) and <key>.json (op, key, inputs, outputs, seconds) into
    `path`; None stops. TORCH_TPU_DUMP_DIR sets it at import."""
    _C._set_dump_dir(os.path.abspath(os.path.expanduser(path)) if path else "")


def dump_dir():
    return _C._dump_dir() or None


@contextlib.contextmanager
def _switched(get, set_, enabled):
    """An engine switch (a getter and setter of _C) set to `enabled` inside the block."""
    prev = get()
    set_(bool(enabled))
    try:
        yield
    finally:
        set_(prev)


@contextlib.contextmanager
def host_tier(enabled):
    """Turns the host tier on or off inside the block (on by default): tiny integer
    and bool ops whose shapes keep changing run with the CPU kernel instead of
    compiling a program per shape (csrc/aten/host_tier.h; counted as host_tier_ops).
    Tests of the lowerings turn it off so that every sample compiles."""
    with _switched(_C._host_tier, _C._set_host_tier, enabled):
        yield


@contextlib.contextmanager
def pipelined_compile(enabled):
    """Turns Strict Eager's pipelined compilation on or off inside the block (by
    default on where the process has 2 CPUs or more; TORCH_TPU_PIPELINED_COMPILE=1|0
    sets it for the process): an op whose
    single-op program is not compiled yet is recorded while the program compiles on
    a background thread (TORCH_TPU_COMPILE_THREADS), and the recorded ops run in
    order, each as its own program, at the next sync point (csrc/engine/compile_pool.h)."""
    with _switched(_C._pipelined_compile, _C._set_pipelined_compile, enabled):
        yield


def clear_program_cache():
    _C._clear_program_cache()


def program_cache_size():
    return _C._program_cache_size()


def compile_program(mlir, name="program"):
    """Compiles a StableHLO module text on the current platform; raises RuntimeError
    naming `name` and the compiler's message when it fails."""
    _C._compile_program(mlir, name)


def lowered_ops():
    """Names of the ATen ops the tpu device runs natively."""
    return sorted(_C._lowered_op_names())


def compiled_graphs():
    """One dict per FX graph torch.compile(backend="tpu") handed over, oldest first:
    id, kind (forward / backward / inference), nodes (FX op nodes), ops (the ATen
    overloads it uses), calls, compiles (fused programs built for it: one per input
    layout), compile_seconds (XLA compile or disk-cache load), cache_hits (calls that
    found the program cached) and stablehlo_files (the .mlir dumped for it while a
    dump directory was set; see set_dump_dir / TORCH_TPU_DUMP_DIR)."""
    from .dynamo import graph_stats
    return [r.as_dict() for r in graph_stats.records()]


def compiled_graph_stablehlo(graph_id):
    """The StableHLO text of a compiled graph's newest program, or None when it was
    compiled while no dump directory was set."""
    from .dynamo import graph_stats
    for r in graph_stats.records():
        if r.id == graph_id:
            return r.stablehlo()
    raise KeyError(f"no compiled graph with id {graph_id}")


def reset_compiled_graphs():
    """Forgets the compiled_graphs() records (the compiled programs stay cached)."""
    from .dynamo import graph_stats
    graph_stats.clear()

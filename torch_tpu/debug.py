"""Counters and reports: what ran, what compiled, what fell back to the CPU."""
from . import _C


def metrics():
    """A dict: ops_executed, programs_compiled, compile_seconds, cache_hits,
    cache_misses, executions, bytes_to_device, bytes_to_host, cpu_fallback_ops and
    cpu_fallback_counts (op name -> calls)."""
    return _C._metrics()


def reset_metrics():
    _C._reset_metrics()


def report():
    """A human-readable summary of metrics()."""
    m = metrics()
    lines = [
        "torch_tpu report",
        f"  ops executed        {m['ops_executed']}",
        f"  programs compiled   {m['programs_compiled']} ({m['compile_seconds']:.3f} s)",
        f"  program cache       {m['cache_hits']} hits, {m['cache_misses']} misses",
        f"  executions          {m['executions']}",
        f"  host -> device      {m['bytes_to_device']} bytes",
        f"  device -> host      {m['bytes_to_host']} bytes",
        f"  CPU-fallback ops    {m['cpu_fallback_ops']}",
    ]
    for name, n in sorted(m["cpu_fallback_counts"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {name}: {n}")
    return "\n".join(lines)


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

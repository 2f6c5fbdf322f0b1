"""Every TORCH_TPU_* environment variable, declared once: name, type, default, meaning.

Python code reads a variable through `get(name)` (typed, with the declared default) or
`raw(name)` (the text, for readers that parse it themselves); C++ code through
`tpu::settings` (csrc/core/settings.h), whose table `csrc/core/settings_table.inc` is
generated from this one, as is docs/settings.md:

    python -m torch_tpu.tools.settings_doc            # rewrite both
    python -m torch_tpu.tools.settings_doc --check    # exit 1 when either is stale

tests/tools/test_settings.py fails when the sources read a TORCH_TPU_* variable that
is not declared here, or when the generated files are stale.

This module imports nothing but the standard library: setup.py loads it by path.
"""
import dataclasses
import os

# Where a setting is read: "runtime" (torch_tpu, Python), "c++" (the extension, through
# csrc/core/settings.h), "vllm" (read by vLLM itself), "build" (setup.py), "test" (the
# test suite), "internal" (written and read by torch_tpu itself; not for users).
SCOPES = ("runtime", "c++", "vllm", "build", "test", "internal")
TYPES = ("bool", "int", "float", "str", "choice", "path", "size")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    type: str
    default: str  # as text, the way it would be written in the environment ("": unset)
    meaning: str
    scope: str = "runtime"
    choices: tuple = ()
    minimum: int = None
    aliases: tuple = ()  # other variable names with the same effect (read after `name`)


_S = Setting
SETTINGS = (
    # -- platform and devices
    _S("TORCH_TPU_PLATFORM", "str", "",
       "The PJRT platform: `tpu`, `cpu`, `cuda` (or `gpu`) or the path of a PJRT plugin `.so`. "
       "Unset: tpu when libtpu is installed and a TPU is attached, else cpu."),
    _S("TORCH_TPU_CPU_DEVICES", "int", "1", "How many devices the CPU plugin exposes.", minimum=1),
    _S("TORCH_TPU_LOG_LEVEL", "choice", "warning",
       "`info` or `debug` let the PJRT plugin's start-up log lines through (by default they are "
       "shown only when the plugin fails to start).", choices=("debug", "info", "warning", "error")),
    _S("TORCH_TPU_CPU_THREADS", "int", "",
       "Threads of the CPU plugin's pools (its workers and the intra-op pool that parallel "
       "loops and matrix products use), passed as XLA's NPROC when the client starts; an "
       "NPROC already set wins. Unset: the CPUs the process may use, one thread per core, "
       "the fastest where the cores are free. On a machine other work keeps busy, more "
       "threads than cores (e.g. 4 on 2 cores) keep a parallel loop from waiting on a "
       "thread that lost its core (docs/performance.md).",
       scope="c++", minimum=1),
    _S("TORCH_TPU_CPU_HOST_GEMM", "bool", "0",
       "On the CPU plugin, float32 matrix products of the forms a BLAS takes (2-D, or batched "
       "over a leading dimension, either operand transposed) run as a custom call into "
       "PyTorch's own CPU GEMM (MKL) instead of XLA's dot. Alone, XLA's transposed and batched "
       "products are 1.4-2x slower than PyTorch's; in the GPT step the call has not yet "
       "measured faster (docs/performance.md), so it is off by default. Needs a build with "
       "jaxlib's XLA FFI header.",
       scope="c++"),
    _S("TORCH_TPU_CPU_KEEP_FREED_MEMORY", "bool", "1",
       "On the CPU plugin, glibc keeps freed memory for reuse instead of returning it to the "
       "system (`torch.tpu.empty_cache()` returns it). Off when GLIBC_TUNABLES or a MALLOC_*_ "
       "variable already tunes malloc."),
    _S("TORCH_TPU_MEMORY_LIMIT", "size", "",
       "A byte limit for every device (e.g. `16GiB`), to emulate a chip's memory on a CPU host. "
       "Unset: none."),
    _S("TORCH_TPU_VISIBLE_DEVICES", "str", "",
       "Read by vLLM (the platform's device-control variable): the devices a worker may use.",
       scope="vllm"),
    # -- execution
    _S("TORCH_TPU_EXECUTION_MODE", "choice", "strict_eager", "The execution mode.",
       choices=("strict_eager", "defer_and_fuse")),
    _S("TORCH_TPU_DEFER_AND_FUSE", "bool", "0",
       "`1`: the same as TORCH_TPU_EXECUTION_MODE=defer_and_fuse (which wins when both are set)."),
    _S("TORCH_TPU_MAX_GRAPH_NODES", "int", "",
       "Defer & Fuse: the pending graph is run when it reaches this many nodes. Unset: the "
       "engine's bound (4000).", minimum=1),
    _S("TORCH_TPU_LAUNCH_BLOCKING", "bool", "0",
       "Every op runs synchronously, so an error points at the op that caused it; wins over "
       "the execution mode.", aliases=("TPU_LAUNCH_BLOCKING",)),
    _S("TORCH_TPU_DEFER_BUCKETS", "bool", "1",
       "Defer & Fuse: a trace whose sizes keep changing runs as the padded program of its "
       "size's bucket (torch_tpu.set_dynamic_buckets) once it verifies against a template "
       "learnt from traces of the same ops at other sizes (docs/compile.md). `0`: one fused "
       "program per size."),
    _S("TORCH_TPU_DEFER_BUCKETS_HOT", "int", "8",
       "Defer & Fuse buckets: a size whose trace has run padded this many times gets its own "
       "exact-size program at its next run (compiled once, then a plain cache hit: no padding, "
       "no hook), so sizes that recur pay the bucket's overhead a bounded number of times. "
       "`0`: always padded.", minimum=0),
    _S("TORCH_TPU_DEFER_STACKS", "bool", "1",
       "Defer & Fuse: each recorded op keeps the user's innermost Python frames, to name the "
       "line of a failing node. `0` skips it.", scope="c++"),
    _S("TORCH_TPU_CHECKS", "bool", "1",
       "Device-side checks of data-dependent errors (out-of-range indices...). `0` turns them "
       "off.", scope="c++"),
    _S("TORCH_TPU_PIPELINED_COMPILE", "bool", "",
       "Strict Eager: an op whose program is not cached yet compiles on a background pool while "
       "later ops are recorded; the programs run in order at the next sync point. Unset: on "
       "where the process may use at least 2 CPUs.",
       scope="c++"),
    _S("TORCH_TPU_COMPILE_LOG_SECONDS", "float", "5",
       "A compile still running after this many seconds prints one line on stderr naming the "
       "program (and another with its time when it ends), so a long cold start does not look "
       "like a hang. `0`: no lines.", scope="c++"),
    _S("TORCH_TPU_COMPILE_THREADS", "int", "",
       "Threads of the background compile pool (pipelined compilation). `0` compiles on the "
       "calling thread. Unset: the CPUs the process may use, at most 8.", scope="c++",
       minimum=0),
    # -- torch.compile
    _S("TORCH_TPU_COMPILE_DECOMPOSITIONS", "choice", "lowered",
       "`core`: AOTAutograd applies PyTorch's whole core decomposition table; `lowered`: ops "
       "with a lowering stay whole.", choices=("lowered", "core")),
    _S("TORCH_TPU_COMPILE_LEAN", "bool", "1",
       "A plain training graph takes the lean run-time instead of AOTAutograd's full one; `0` "
       "always uses AOTAutograd's."),
    # -- compile cache
    _S("TORCH_TPU_CACHE", "bool", "1", "`0`: compiled programs are kept in memory only."),
    _S("TORCH_TPU_CACHE_DIR", "path", "~/.cache/torch_tpu",
       "Where compiled programs persist (shared by processes)."),
    _S("TORCH_TPU_CACHE_MAX_BYTES", "size", "10GiB",
       "Size bound of the persistent cache; least recently used entries go first."),
    # -- debugging
    _S("TORCH_TPU_DUMP_DIR", "path", "", "Writes every compiled program's StableHLO there."),
    _S("TORCH_TPU_CHECK_NUMERICS", "choice", "0",
       "`1` (or `raise`): re-runs every op on the CPU and raises at the first that differs; "
       "`warn`: warns once and goes on.", choices=("0", "1", "raise", "warn", "true", "yes",
                                                   "false", "no")),
    _S("TORCH_TPU_DEBUG_FAIL_COMPILE", "str", "",
       "Fault injection: compiling any program whose StableHLO contains this text fails.",
       scope="c++"),
    _S("TORCH_TPU_DEBUG_FAIL_EXECUTE", "str", "",
       "Fault injection: running any program whose description or recording Python line "
       "contains this text fails (asynchronously, as a device error would).", scope="c++"),
    # -- distributed (the `tpu` process-group backend)
    _S("TORCH_TPU_DIST_IN_PLACE", "bool", "1",
       "Collectives on the CPU plugin reduce in place in device memory; `0` stages through "
       "host memory.", scope="c++"),
    _S("TORCH_TPU_DIST_HOST_VIEW", "bool", "1",
       "Collectives read the CPU plugin's buffers in place; `0` copies them.", scope="c++"),
    _S("TORCH_TPU_DIST_PIECE_MB", "float", "",
       "Host-staged collectives split tensors into pieces of this many MiB (from twice it); "
       "`0`: no pieces. Unset: chosen by size.", scope="c++"),
    _S("TORCH_TPU_DIST_STAGING_POOL_MB", "int", "512",
       "Idle host staging memory kept for reuse, in MiB.", scope="c++", minimum=0),
    _S("TORCH_TPU_DIST_PROFILE", "bool", "0",
       "Times each phase of the collectives and prints a table at exit.", scope="c++"),
    # -- integrations
    _S("TORCH_TPU_VLLM", "bool", "1", "`0`: the vLLM platform plugin declines (vLLM picks its own)."),
    _S("TORCH_TPU_VLLM_KV_CACHE_BYTES", "int", str(1 << 30),
       "vLLM: bytes of the paged KV cache.", minimum=1),
    _S("TORCH_TPU_SET_ACCELERATE_TORCH_DEVICE", "str", "",
       "Records the ACCELERATE_TORCH_DEVICE value torch_tpu set, so that a child process "
       "recomputes it.", scope="internal"),
    # -- build and tests
    _S("TORCH_TPU_BUILD_TYPE", "choice", "Release", "CMake build type of the extension.",
       scope="build", choices=("Release", "Debug", "RelWithDebInfo")),
    _S("TORCH_TPU_EXT_PREBUILT", "bool", "0",
       "setup.py reuses the extension already built in-tree (a second environment with the "
       "same torch).", scope="build"),
    _S("TORCH_TPU_WHEEL_EXTENSIONS", "bool", "0",
       "setup.py packages the extensions scripts/build_wheel.sh built (one per torch release, "
       "under torch_tpu/_ext) instead of building one.", scope="build"),
    _S("TORCH_TPU_PJRT_PLUGIN", "path", "", "The PJRT plugin the C++ unit tests load.",
       scope="test"),
    _S("TORCH_TPU_FUZZ_LONG", "bool", "0", "The differential fuzzer's long run.", scope="test"),
    _S("TORCH_TPU_FUZZ_EXAMPLES", "int", "",
       "Fuzzer programs per eager mode (unset: 120, long run 8500).", scope="test", minimum=0),
    _S("TORCH_TPU_FUZZ_COMPILED_EXAMPLES", "int", "",
       "Fuzzer programs compiled (unset: 60, long run 3000).", scope="test", minimum=0),
)
del _S

BY_NAME = {s.name: s for s in SETTINGS}

# TORCH_TPU_* identifiers in the sources that are not environment variables.
NOT_SETTINGS = {
    "TORCH_TPU_PAGED": "the name of the vLLM attention backend",
    "TORCH_TPU_CORE_ONLY": "a CMake option (scripts/build_core.sh)",
    "TORCH_TPU_PCH": "a CMake option (scripts/cmake_ext.py --pch)",
}


def _declared(name):
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in torch_tpu/settings.py") from None


def raw(name):
    """The variable's text (stripped), or None when it and its aliases are unset or empty."""
    s = _declared(name)
    for n in (s.name,) + s.aliases:
        v = os.environ.get(n, "").strip()
        if v:
            return v
    return None


def _parse(s, text):
    if s.type == "bool":
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{s.name} must be 0 or 1, got {text!r}")
    if s.type == "int":
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or (s.minimum is not None and v < s.minimum):
            kind = {0: "a non-negative integer", 1: "a positive integer"}.get(s.minimum, "an integer")
            raise ValueError(f"{s.name} must be {kind}, got {text!r}")
        return v
    if s.type == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{s.name} must be a number, got {text!r}") from None
    if s.type == "choice":
        if text not in s.choices and text.lower() not in s.choices:
            raise ValueError(f"{s.name} must be one of {', '.join(s.choices)}, got {text!r}")
        return text if text in s.choices else text.lower()
    if s.type == "path":
        return os.path.abspath(os.path.expanduser(text))
    return text  # str; size (its readers parse it and warn on a bad one)


def get(name):
    """The typed value in effect: the environment's when set, else the declared default
    (None when the default is "unset"). A malformed value raises ValueError naming it."""
    s = _declared(name)
    text = raw(name)
    if text is None:
        text = s.default
        if text == "":
            return None if s.type != "bool" else False
    return _parse(s, text)


def check():
    """Parses every setting that is set, so that a malformed one fails at import with a
    clear message (also those read in C++, which falls back to the default instead)."""
    for s in SETTINGS:
        if s.scope in ("runtime", "c++"):
            get(s.name)


def in_effect():
    """{name: text} of the declared variables set in this process's environment."""
    out = {}
    for s in SETTINGS:
        if s.scope == "internal":
            continue
        for n in (s.name,) + s.aliases:
            if os.environ.get(n, "").strip():
                out[n] = os.environ[n]
    return out


def unknown_in_environment():
    """TORCH_TPU_* variables in the environment that torch_tpu does not read (typos)."""
    known = set(BY_NAME) | {a for s in SETTINGS for a in s.aliases}
    return sorted(n for n in os.environ if n.startswith("TORCH_TPU_") and n not in known)
